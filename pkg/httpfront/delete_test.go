package httpfront_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// docs/proxy-core.md: a session's child is stopped at DELETE (grace, then SIGTERM/SIGKILL) and
// what it held is recorded unknown. The client that ends a session while a fenced call is in
// flight has not learnt that call's outcome; the same call from a new session is refused as a
// prior failure (fenced), never started a second time, and the other sessions go on.
func TestDeleteRecordsUnknown(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid, other := g.open(nil), g.open(nil)
	done := make(chan reply, 1)
	go func() {
		r, _ := g.post(context.Background(), sid, nil, call(70, "slow", `{"ms":5000,"tag":"del"}`))
		done <- r
	}()
	for !strings.Contains(g.log.String(), "slow tag=del started") {
		time.Sleep(20 * time.Millisecond)
	}
	g.deleteSession(t, sid)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the call of the deleted session was never answered")
	}
	r := g.mustPost(other, nil, call(71, "slow", `{"ms":5000,"tag":"del"}`))
	if len(r.raw) == 0 || !strings.Contains(r.raw[len(r.raw)-1], "prior_failure") {
		t.Fatalf("the same call after the DELETE was answered %v, want a prior_failure refusal", r.raw)
	}
	// Each child's stderr line (not the log's quote of it in the unknown message).
	if n := strings.Count("\n"+g.log.String(), "\nmcptest: slow tag=del started"); n != 1 {
		t.Fatalf("the call started %d times; once at most", n)
	}
	if got := g.front.Sessions(); got != 1 {
		t.Fatalf("%d sessions open after the DELETE, want 1", got)
	}
}
