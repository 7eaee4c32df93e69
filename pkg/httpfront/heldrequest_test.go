package httpfront_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServerRequestWaitsForAStream: a request of the server's (sampling, roots, elicitation)
// that comes while the client has no SSE stream open (its call's POST answered as JSON, no GET
// stream; or, with a task, between two polls of tasks/get) is handed to the next stream the
// client opens. It was dropped: the server waited for an answer that could not come (an SDK
// server gives up after 60 s), and a task's elicitation, which an SDK server sends once, was
// never seen by the client that then called tasks/result for it, as MCP has it do.
func TestServerRequestWaitsForAStream(t *testing.T) {
	g := newGW(t, nil)
	sid := g.open(nil)
	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(call(51, "ask", `{}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json") // answered as JSON: no stream of its own
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := bufio.NewReader(resp.Body).ReadString(0)
		done <- b
	}()
	for !strings.Contains(g.log.String(), "mcptest: asked") {
		time.Sleep(10 * time.Millisecond)
	}
	// Only now does the client open a stream: a GET.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- d
			}
		}
		close(events)
	}()
	var final string
	for final == "" {
		select {
		case d, ok := <-events:
			if !ok {
				t.Fatal("the GET stream ended")
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal([]byte(d), &m) == nil && m.Method == "roots/list" {
				ans := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"roots":[{"uri":"file:///tmp/held"}]}}`, m.ID)
				if r := g.mustPost(sid, nil, ans); r.status != http.StatusAccepted {
					t.Fatalf("posting the answer: status %d", r.status)
				}
			}
		case final = <-done:
		}
	}
	if !strings.Contains(final, "client said:") || !strings.Contains(final, "file:///tmp/held") {
		t.Fatalf("the call did not get the client's answer: %s", final)
	}
}
