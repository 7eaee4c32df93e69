package httpfront_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
)

// Streams whose clients read nothing share one bound on what they queue (BacklogBudget,
// beyond the first part of each stream's backlog), not only one each (64 MiB): a client that
// opened many streams and read none made the gateway hold up to 64 MiB for each, until its
// writes timed out, and opened more. Here three sessions' GET streams, never read, each get 24
// MB of progress notifications: with a budget of 8 MiB and 1 MiB free per stream, at most 11
// MiB stay queued (the streams past it end, their backlogs dropped, as a stream past 64 MiB
// does), and once the streams have ended nothing of the budget is still taken. Before, about
// 10 MB or more per stream stayed queued (what the sockets had not taken).
func TestBacklogsShareOneBudget(t *testing.T) {
	const total, free, sessions = 8 << 20, 1 << 20, 3
	restore, used := httpfront.SetBacklogBudget(total, free)
	t.Cleanup(restore) // after the gateway's own clean-up (its streams give back what they took)
	g := newGW(t, nil)
	var gets []*http.Response
	for range sessions {
		sid := g.open(nil)
		resp, _ := openGET(t, g, sid) // not read from here on
		gets = append(gets, resp)
		// 1500 progress notifications of 16 KB each (their token), routed to the GET stream
		// since the call's own response is plain JSON.
		token := `"` + strings.Repeat("t", 16<<10) + `"`
		r := g.mustPost(sid, hdr{"Accept": "application/json"}, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"progress","arguments":{"n":1500},"_meta":{"progressToken":%s}}}`, token))
		if r.status != http.StatusOK {
			t.Fatalf("the flooding call: status %d", r.status)
		}
	}
	// Every notification was routed before each call's response was handed over.
	if got := g.front.Backlog(); got > total+sessions*free {
		t.Fatalf("%d bytes queued for %d streams that read nothing (24 MB of notifications each), want at most %d", got, sessions, total+sessions*free)
	}
	// The streams that passed the budget were ended: reading them reaches their end.
	for i, resp := range gets {
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, resp.Body); done <- err }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("GET stream %d, past the budget, was not ended", i)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for used() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of the backlog budget still taken once every stream has ended", used())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
