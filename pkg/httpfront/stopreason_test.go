package httpfront_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// Found in review (2026-12-06). A fenced call still inside the server when its session is
// deleted, past the grace, is unknown because the stop closed the server, not because the
// server failed: its answer, and the reason recorded in the ledger (which the retry's
// refusal, the on_unknown hook and an elicitation repeat), say that effectfence stopped the
// server and why. Before, both said the MCP server failed (the ledger: "died or the
// connection failed") and sent an operator after a server that was fine.
func TestCallCutByAStopSaysSo(t *testing.T) {
	t.Parallel()
	g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) { o.Grace = 300 * time.Millisecond })
	sid := g.open(nil)
	body := call(2, "slow", `{"ms":60000,"tag":"cut"}`)
	answered := make(chan reply, 1)
	go func() {
		r, err := g.post(context.Background(), sid, nil, body)
		if err != nil {
			t.Error(err)
		}
		answered <- r
	}()
	waitLog(t, g, "slow tag=cut started")
	g.deleteSession(t, sid)
	var r reply
	select {
	case r = <-answered:
	case <-time.After(time.Minute):
		t.Fatal("the call of the deleted session was never answered")
	}
	if r.status != http.StatusOK || len(r.msgs) == 0 {
		t.Fatalf("the call of the deleted session: %d %v", r.status, r.raw)
	}
	text := resultText(t, r.last(t))
	if !strings.Contains(text, "whether it took effect is unknown") || !strings.Contains(text, "effectfence stopped the MCP server") || !strings.Contains(text, "the client ended the session") || strings.Contains(text, "server failed") {
		t.Fatalf("the call cut by the session's stop was answered %q; want it to say effectfence stopped the server because the client ended the session, and that the outcome is unknown", text)
	}
	retry := g.mustPost(g.open(nil), nil, body)
	refusal := retry.raw[len(retry.raw)-1]
	if !strings.Contains(refusal, "prior_failure") || !strings.Contains(refusal, "effectfence stopped the MCP server with the call inside it (the client ended the session") || strings.Contains(refusal, "died") {
		t.Fatalf("the retry was answered %s; want a prior_failure naming the stop as the reason", refusal)
	}
}
