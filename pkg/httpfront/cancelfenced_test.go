package httpfront_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// docs/gateway.md, "A broken stream is not a failure": a notifications/cancelled for a fenced
// call that reached the server does not abort it: the call finishes, its outcome is recorded,
// the cancelled request is answered with that outcome (an agent that gave up ignores it; one
// whose stream broke never sees it), and the call re-sent under a new id receives it too:
// one execution.
func TestCancelledFencedCallStillRunsOnce(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid := g.open(nil)
	done := make(chan reply, 1)
	go func() {
		r, err := g.post(context.Background(), sid, nil, call(70, "slow", `{"ms":600,"tag":"cancelfenced"}`))
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	waitLog(t, g, "slow tag=cancelfenced started")
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":70,"reason":"the user gave up"}}`); r.status != http.StatusAccepted {
		t.Fatalf("cancel: status %d", r.status)
	}
	select {
	case r := <-done:
		if text := resultText(t, r.last(t)); !strings.HasPrefix(text, "slow done n=1 ") {
			t.Fatalf("the cancelled fenced call was answered %q, want its execution's result", text)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled request's stream stayed open")
	}
	r := g.mustPost(sid, nil, call(71, "slow", `{"ms":600,"tag":"cancelfenced"}`))
	if text := resultText(t, r.last(t)); !strings.HasPrefix(text, "slow done n=1 ") {
		t.Fatalf("the call re-sent after the cancellation was answered %q, want the one execution's result", text)
	}
	if n := len(mcptest.Effects(g.effects)); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	if strings.Count(g.log.String(), "slow tag=cancelfenced started") != 1 {
		t.Fatal("the call was started twice")
	}
}
