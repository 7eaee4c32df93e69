package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestLostAnswerOfAResolve loses the answer of each round trip of an operator's resolution
// (by the claim's token) of an intent of unknown outcome in turn, as happened and as did not
// happen, with the database back at once and away for a while, and retries the same
// resolution as an operator would. A retry after a resolution that landed is told so from the
// audit trail (SettledBeforeError, its own earlier attempt), not that the ledger holds no such
// intent or that it is done; a retry after one that did not land resolves it; there is never
// a second resolution.
func TestLostAnswerOfAResolve(t *testing.T) {
	g := newCutRig(t)
	ctx := context.Background()
	e := fence.New(keepOpen{g.st}, fence.Config{LeaseTTL: time.Minute, SpoolDir: g.spool})
	defer e.Close()
	run := func(how fence.Resolution, k int, down time.Duration) int64 {
		g.n++
		name := fmt.Sprintf("resolve %s k=%d down=%s", how, k, down)
		r := fence.Request{Intent: fmt.Sprintf("cutresolve:%d", g.n), Tool: "charge"}
		adm, err := e.Prepare(ctx, r)
		if err != nil || !adm.Fresh() {
			t.Fatalf("%s: the claim: %+v %v", name, adm, err)
		}
		if err := e.Lost(ctx, *adm.Ticket, "the processor did not answer"); err != nil {
			t.Fatalf("%s: lost: %v", name, err)
		}
		req := fence.ResolveRequest{Intent: r.Intent, How: how, Who: "operator", Via: "cli", Reason: "checked the processor", Token: adm.Ticket.Token}
		start, lost := g.p.RoundTrips(), g.p.Lost()
		if k > 0 {
			g.p.LoseAnswer(k, down)
		}
		_, rerr := e.Resolve(ctx, req)
		trips := g.p.RoundTrips() - start
		g.p.LoseAnswer(0, 0)
		if k > 0 && g.p.Lost() == lost {
			t.Fatalf("%s: no answer was lost (the resolve took %d round trips)", name, trips)
		}
		time.Sleep(down)
		landed := g.events(r.Intent)[how.Event()]
		if rerr == nil && landed != 1 {
			t.Fatalf("%s: answered done, with %d events", name, landed)
		}
		if rerr != nil {
			_, again := e.Resolve(ctx, req)
			var before fence.SettledBeforeError
			switch {
			case landed == 1 && (!errors.As(again, &before) || !before.Mine || before.Event.Token != adm.Ticket.Token || before.Event.Kind != how.Event()):
				t.Fatalf("%s: the first resolution had landed (answered %v); the retry was answered %v", name, rerr, again)
			case landed == 0 && again != nil:
				t.Fatalf("%s: the first resolution had not landed (answered %v); the retry was answered %v", name, rerr, again)
			}
			if n := g.events(r.Intent)[how.Event()]; n != 1 {
				t.Fatalf("%s: %d %s events after the retry", name, n, how.Event())
			}
			t.Logf("%s: answered %v; the retry %v", name, rerr, again)
		}
		st, err := e.Status(ctx, r.Intent)
		switch {
		case err != nil:
			t.Fatalf("%s: status: %v", name, err)
		case how == fence.Happened && st.State != fence.StateDone, how == fence.DidNotHappen && st.State != fence.StateNone:
			t.Fatalf("%s: the intent is %s", name, st.State)
		}
		return trips
	}
	for _, how := range []fence.Resolution{fence.Happened, fence.DidNotHappen} {
		n := run(how, 0, 0)
		if n < 1 || n > 6 {
			t.Fatalf("a resolve took %d round trips", n)
		}
		for k := 1; k <= int(n); k++ {
			for _, down := range []time.Duration{0, 250 * time.Millisecond} {
				run(how, k, down)
			}
		}
	}
}
