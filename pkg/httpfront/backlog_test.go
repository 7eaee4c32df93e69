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
	"github.com/effectfence/effectfence/pkg/wrap"
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
	resp, _ := openGET(t, g, sid)
	// Not read from here on.
	const n = 12000
	progressFlood(t, g, sid, n)
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

// Every entry a session keeps for an open stream is gone once the stream ends, whichever way
// it ends: a JSON response, an SSE response after progress, the client hanging up mid-stream
// (its id stays taken until the proxy has answered the call, see TestReusedIDOfAHungUpRequest),
// the agent's cancellation, a request refused for reusing an open id, a GET stream closed by
// its client.
func TestStreamEntriesGoWhenStreamsEnd(t *testing.T) {
	g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) { o.Pass = []string{"slow"} })
	sid := g.open(nil)
	g.mustPost(sid, hdr{"Accept": "application/json"}, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"progress","arguments":{"n":2},"_meta":{"progressToken":"json"}}}`)
	g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"progress","arguments":{"n":2},"_meta":{"progressToken":"sse"}}}`)

	// The client hangs up mid-stream: the call goes on, its stream is over.
	ctx, hangUp := context.WithCancel(context.Background())
	hungUp := make(chan struct{})
	go func() {
		defer close(hungUp)
		_, _ = g.post(ctx, sid, nil, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"slow","arguments":{"ms":400,"tag":"hangup"},"_meta":{"progressToken":"h"}}}`)
	}()
	waitLog(t, g, "slow tag=hangup started")
	// The same id again while it is open: refused.
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":4,"method":"ping"}`); r.status != http.StatusBadRequest {
		t.Fatalf("a request reusing an open id: status %d, want 400", r.status)
	}
	hangUp()
	<-hungUp

	// The agent cancels a request: it ends without a response.
	cancelled := make(chan struct{})
	go func() {
		defer close(cancelled)
		_, _ = g.post(context.Background(), sid, nil, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{"ms":30000,"tag":"cancel"},"_meta":{"progressToken":"c"}}}`)
	}()
	waitLog(t, g, "slow tag=cancel started")
	g.mustPost(sid, nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	<-cancelled

	// A GET stream its client closes.
	_, closeGet := openGET(t, g, sid)
	closeGet()

	deadline := time.Now().Add(20 * time.Second)
	for g.front.OpenStreams() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d stream entries left after every stream ended", g.front.OpenStreams())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitLog(t *testing.T, g *gw, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(g.log.String(), what) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %q in the log", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A client that keeps its GET stream open and stops reading fills the socket's buffers; the
// write that then blocks is bounded in time, so the stream ends (its goroutine and entries
// go) instead of waiting on TCP for as long as the connection lives. The backlog here stays
// under its bound: the deadline alone ends it. Before, the stream stayed open.
func TestStalledStreamWriteIsBounded(t *testing.T) {
	defer httpfront.SetWriteTimeout(time.Second)()
	g := newGW(t, nil)
	sid := g.open(nil)
	openGET(t, g, sid)
	open := g.front.OpenStreams()
	// Not read from here on: 32 MB, more than loopback's socket buffers hold.
	progressFlood(t, g, sid, 32000)
	deadline := time.Now().Add(30 * time.Second)
	for g.front.OpenStreams() >= open {
		if time.Now().After(deadline) {
			t.Fatalf("the GET stream its client stopped reading is still open (%d entries, %d bytes queued)", g.front.OpenStreams(), g.front.Backlog())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openGET opens the session's GET stream and returns it with a func that closes it as its
// client would (the test's end closes it too).
func openGET(t *testing.T, g *gw, sid string) (*http.Response, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	closeIt := func() { cancel(); resp.Body.Close() }
	t.Cleanup(closeIt)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: status %d", resp.StatusCode)
	}
	return resp, closeIt
}

// progressFlood makes the server send n progress notifications of about 1 KB each (their
// token), routed to the GET stream because the call's own response is plain JSON.
func progressFlood(t *testing.T, g *gw, sid string, n int) {
	t.Helper()
	token := `"` + strings.Repeat("t", 1000) + `"`
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"progress","arguments":{"n":%d},"_meta":{"progressToken":%s}}}`, n, token)
	r := g.mustPost(sid, hdr{"Accept": "application/json"}, body)
	if r.status != http.StatusOK || !strings.Contains(resultText(t, r.last(t)), "progress done") {
		t.Fatalf("progress call: status %d %.200v", r.status, r.raw)
	}
}
