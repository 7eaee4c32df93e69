package main

import (
	"context"
	"io"
	"net/http"
)

// searchPost is shared by several tools: the search API takes its query as a POST body.
func searchPost(ctx context.Context, path string) (string, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
