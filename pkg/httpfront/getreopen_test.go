package httpfront_test

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

// docs/gateway.md, Endpoints: one GET stream per session, a second gets 409. A client whose
// GET stream broke opens another, which is served once the gateway has seen the first one
// end, and carries the server's messages from then on (here a progress notification of a
// call answered as plain JSON, which only the GET stream can take).
func TestGETStreamReopensAfterADrop(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid := g.open(nil)
	_, drop := openGET(t, g, sid)
	drop() // the client's stream breaks
	var resp *http.Response
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, g.url, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCode == http.StatusOK {
			resp = r
			break
		}
		r.Body.Close()
		if r.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("GET after the first stream broke: status %d, want 200 once the gateway saw it end", r.StatusCode)
		}
	}
	defer resp.Body.Close()
	r := g.mustPost(sid, hdr{"Accept": "application/json"}, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"progress","arguments":{"n":1},"_meta":{"progressToken":"reopened"}}}`)
	if r.status != http.StatusOK || !strings.Contains(resultText(t, r.last(t)), "progress done") {
		t.Fatalf("progress call: status %d %v", r.status, r.raw)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if !strings.Contains(d, `"notifications/progress"`) || !strings.Contains(d, `"reopened"`) {
				t.Fatalf("the reopened GET stream carried %s, want the progress notification", d)
			}
			return
		}
	}
	t.Fatalf("the reopened GET stream ended without a message: %v", sc.Err())
}
