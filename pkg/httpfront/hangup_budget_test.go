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

// A large call whose client hangs up once its body is in keeps its share of RequestBudget
// until the proxy has served it: the call goes on (a broken stream is not a cancellation) and
// holds its message all along, so giving the room back at the hang-up let a client that sends
// large calls and hangs up at once hold any number of them in memory. A second large call
// meanwhile waits for room and, finding none, gets 503, unread: nothing ran. Once the first
// call is served there is room again. (Not parallel: it holds the process's budget.)
func TestHungUpLargeCallKeepsItsBudget(t *testing.T) {
	const bound = time.Second
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.BodyTimeout = bound })
	sid := g.open(nil)
	// Room for one large message of 2 MiB, not two.
	const charge = httpfront.RequestCost * 2 << 20
	release := httpfront.HoldRequestBudgetBut(t, charge*3/2)
	defer release()
	base := httpfront.RequestBudgetUsed()
	pad := strings.Repeat("p", 2<<20)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = g.post(ctx, sid, nil, call(2, "slow", `{"ms":3000,"tag":"big","note":"`+pad+`"}`))
	}()
	for !strings.Contains(g.log.String(), "slow tag=big started") {
		time.Sleep(20 * time.Millisecond)
	}
	cancel() // the client hangs up; the call goes on
	<-done
	time.Sleep(100 * time.Millisecond) // the POST's handler has ended

	if used := httpfront.RequestBudgetUsed() - base; used < charge {
		t.Errorf("the call still being served holds %d bytes of the budget, want its body's charge, %d", used, charge)
	}
	r, err := g.post(context.Background(), sid, nil, call(3, "charge", `{"amount":7,"note":"`+pad+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("a second large call while the first is served: %d %.200v, want 503 (no room)", r.status, r.raw)
	}
	for g.inFlight() > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if used := httpfront.RequestBudgetUsed() - base; used != 0 {
		t.Fatalf("%d bytes of the budget still held after the call was served, want 0", used)
	}
	if r := g.mustPost(sid, nil, call(4, "charge", `{"amount":8,"note":"`+pad+`"}`)); r.status != http.StatusOK || strings.Contains(r.raw[0], `"error"`) {
		t.Fatalf("a large call once the first was served: %d %.200v; want it run", r.status, r.raw)
	}
	if got := mcptest.Effects(g.effects); len(got) != 2 || !strings.HasPrefix(got[0], "slow tag=big") {
		t.Fatalf("executions %d, want the slow call and the last charge", len(got))
	}
}
