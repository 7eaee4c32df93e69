package httpfront_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
)

// A client that keeps its GET stream open without reading it cannot make the gateway queue
// without bound what the server sends (here a real child's 12 MB of notifications, routed to
// the GET stream because their request's own response is plain JSON): once the stream's
// backlog passes the bound it is ended and its backlog dropped, as if the client had hung up.
// Before, every message was queued on the stalled stream for as long as it stayed open.
func TestStalledStreamBacklogIsBounded(t *testing.T) {
	const bound = 256 << 10
	defer httpfront.SetMaxBacklog(bound)()
	g := newGW(t, nil)
	sid := g.open(nil)
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
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: status %d", resp.StatusCode)
	}
	// Not read from here on. Each notification carries the 1,000-byte token.
	token := `"` + strings.Repeat("t", 1000) + `"`
	const n = 12000
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"progress","arguments":{"n":%d},"_meta":{"progressToken":%s}}}`, n, token)
	r := g.mustPost(sid, hdr{"Accept": "application/json"}, body)
	if r.status != http.StatusOK || !strings.Contains(resultText(t, r.last(t)), "progress done") {
		t.Fatalf("progress call: status %d %.200v", r.status, r.raw)
	}
	// Every notification was routed before the response was handed over (mcpstdio's order).
	if got := g.front.Backlog(); got > bound {
		t.Fatalf("%d bytes queued for a client that reads nothing (%d notifications of 1 KB sent), want at most the bound", got, n)
	}
	// The stalled stream was ended: reading it now reaches its end.
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); done <- err }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stalled GET stream was not ended")
	}
}
