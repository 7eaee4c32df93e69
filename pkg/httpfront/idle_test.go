package httpfront_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// A session whose agent broke its stream while a fenced call runs is not idle: the call is
// still inside the server, and a broken stream is not a failure (docs/gateway.md). Closing
// the session for --session-idle then would stop its child mid-call and leave the call
// unknown. With an idle limit far shorter than the call, the call finishes, its outcome is
// recorded, and the re-sent call (from a new session, as a client that lost its stream may
// do) receives it. Once the call is over, the session is closed for its idleness.
func TestIdleLimitSparesACallInFlight(t *testing.T) {
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.Idle = 400 * time.Millisecond })
	sid := g.open(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := g.post(ctx, sid, nil, call(20, "slow", `{"ms":3000,"tag":"idle"}`))
		done <- err
	}()
	for !strings.Contains(g.log.String(), "slow tag=idle started") {
		time.Sleep(20 * time.Millisecond)
	}
	cancel() // the stream breaks mid-call; the agent sends nothing more on this session
	<-done
	r := g.mustPost(g.open(nil), nil, call(21, "slow", `{"ms":3000,"tag":"idle"}`))
	text := resultText(t, r.last(t))
	if !strings.HasPrefix(text, "slow done n=1 ") {
		t.Fatalf("the re-sent call was answered %q, want the first execution's result; log:\n%s", text, g.log.String())
	}
	if n := len(mcptest.Effects(g.effects)); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	// Once its call is over, the first session is idle and closed (the log says so; asking
	// it would count as activity), and then unknown to the gateway.
	closed := "session " + sid[:8] + " idle for 400ms: closed"
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(g.log.String(), closed); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the idle session was never closed; log:\n%s", g.log.String())
		}
	}
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":22,"method":"ping"}`); r.status != http.StatusNotFound {
		t.Fatalf("a request on the closed session: status %d, want 404", r.status)
	}
}
