package httpfront_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// docs/gateway.md: a request of the server's that comes while the client has no stream open
// "waits for the next stream the client opens, unless the server cancels it first". The
// server (a real child) asks the client for its roots while the call that made it ask is
// answered as JSON and no GET stream is open, then gives up on its request (its
// notifications/cancelled) and answers the call. The GET stream the client opens afterwards
// must not hand it the request the server gave up on (a client would ask its user, and answer,
// for nothing): the first request it carries is the one the server asks next, and the
// client's answer to it reaches the server.
func TestServerRequestCancelledWhileHeldIsNotHandedOut(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid := g.open(nil)
	jsonCall := func(body string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json") // answered as JSON: no stream of its own
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// ms: the server gives up on its request after 300 ms.
	if got := jsonCall(call(61, "ask", `{"ms":300}`)); !strings.Contains(got, "ask cancelled") {
		t.Fatalf("the call whose request the server gave up on was answered %s; want \"ask cancelled\"", got)
	}

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
	requests := make(chan json.RawMessage, 8)
	go func() {
		defer close(requests)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			d, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal([]byte(d), &m) == nil && m.Method == "roots/list" {
				requests <- m.ID
			}
		}
	}()
	// The server asks again, with the GET stream open: that request is the first it carries.
	answered := make(chan string, 1)
	go func() { answered <- jsonCall(call(62, "ask", `{}`)) }()
	var id json.RawMessage
	select {
	case id = <-requests:
	case <-time.After(time.Minute):
		t.Fatalf("no request of the server's on the GET stream within a minute\n%s", g.log.String())
	}
	// A stale request would be flushed as the GET opens, before the server asks again, so it
	// would be the first one here: answered, it would leave the second call unanswered (the
	// server gives up after 10 s: "client did not answer").
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"roots":[{"uri":"file:///tmp/second"}]}}`); r.status != http.StatusAccepted {
		t.Fatalf("posting the answer: status %d", r.status)
	}
	if got := <-answered; !strings.Contains(got, "file:///tmp/second") {
		t.Fatalf("the second call was answered %s, not with the client's answer to the first request on the GET stream (id %s): was that the request the server had given up on?", got, id)
	}
}
