package serve_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// As Serve's doc says: a second Serve of one Server while the first runs is refused at once
// and the first keeps serving; a second Server over the same engine serves beside it.
func TestOneServePerServerTwoServersSideBySide(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	srv, err := serve.New(eng, serve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := startStdioWith(t, eng, serve.Options{}, nil) // a Server of its own
	first := startStdioOf(t, srv)
	inR, inW := io.Pipe()
	defer inW.Close()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), inR, io.Discard) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "session already exists") {
			t.Fatalf("a second Serve of one Server: %v; want the session refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second Serve of one Server neither served nor returned")
	}
	for name, c := range map[string]*stdioClient{"the first Serve": first, "another Server": a} {
		select {
		case resp := <-c.send(7, "ping", map[string]any{}):
			if !strings.Contains(string(resp), `"result"`) {
				t.Errorf("%s: ping answered %s", name, resp)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s no longer answers", name)
		}
	}
}
