package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestLostAnswerOfAClear loses the answer of each round trip of an operator's clear of a
// claim (by its token, forced) in turn, with the database back at once and away for a while.
// The operator is told the truth: a clear answered as done is in the ledger, once; one
// answered with an error either did not land (the claim is there, unchanged) or says its fate
// is unknown; and a retry of the same clear never clears twice. After it, one attempt of the
// intent is admitted.
func TestLostAnswerOfAClear(t *testing.T) {
	g := newCutRig(t)
	ctx := context.Background()
	e := fence.New(keepOpen{g.st}, fence.Config{LeaseTTL: time.Minute, SpoolDir: g.spool})
	defer e.Close()
	run := func(k int, down time.Duration) int64 {
		g.n++
		name := fmt.Sprintf("clear k=%d down=%s", k, down)
		r := fence.Request{Intent: fmt.Sprintf("cutclear:%d", g.n), Tool: "charge"}
		adm, err := e.Prepare(ctx, r)
		if err != nil || !adm.Fresh() {
			t.Fatalf("%s: the claim: %+v %v", name, adm, err)
		}
		start, lost := g.p.RoundTrips(), g.p.Lost()
		if k > 0 {
			g.p.LoseAnswer(k, down)
		}
		_, cerr := e.ClearClaim(ctx, r.Intent, adm.Ticket.Token, "operator", "checked the processor", true)
		trips := g.p.RoundTrips() - start
		g.p.LoseAnswer(0, 0)
		if k > 0 && g.p.Lost() == lost {
			t.Fatalf("%s: no answer was lost (the clear took %d round trips)", name, trips)
		}
		time.Sleep(down)
		st, err := e.Status(ctx, r.Intent)
		if err != nil {
			t.Fatalf("%s: status: %v", name, err)
		}
		clears := g.events(r.Intent)[fence.EventClear]
		var unknown CommitUnknownError
		switch {
		case clears > 1:
			t.Fatalf("%s: %d clear events", name, clears)
		case cerr == nil && (clears != 1 || st.State != fence.StateNone):
			t.Fatalf("%s: the clear was answered done; the record is %s with %d clear events", name, st.State, clears)
		case cerr != nil && clears == 1 && !errors.As(cerr, &unknown):
			t.Fatalf("%s: the clear landed, and was answered %v (not an unknown outcome)", name, cerr)
		case cerr != nil && clears == 0 && (st.State != fence.StateInFlight || st.Token != adm.Ticket.Token):
			t.Fatalf("%s: the clear did not land (%v), and the record is %s token %d", name, cerr, st.State, st.Token)
		}
		if cerr != nil {
			// The operator retries the same clear.
			// One that landed is told so, from the audit trail: its clear, by the same
			// operator for the same reason (before, it was told there is no such intent).
			_, rerr := e.ClearClaim(ctx, r.Intent, adm.Ticket.Token, "operator", "checked the processor", true)
			landed := clears == 1
			var before fence.SettledBeforeError
			if landed && (!errors.As(rerr, &before) || !before.Mine || before.Event.Kind != fence.EventClear || before.Event.Token != adm.Ticket.Token) {
				t.Fatalf("%s: the first clear had landed; the retry was answered %v", name, rerr)
			}
			if !landed && rerr != nil {
				t.Fatalf("%s: the first clear had not landed; the retry was answered %v", name, rerr)
			}
			if n := g.events(r.Intent)[fence.EventClear]; n != 1 {
				t.Fatalf("%s: %d clear events after the retry", name, n)
			}
		}
		oneAdmission(t, r.Intent, e, g.other)
		if k > 0 {
			t.Logf("%s: answered %v", name, cerr)
		}
		return trips
	}
	n := run(0, 0)
	if n < 1 || n > 4 {
		t.Fatalf("a clear took %d round trips", n)
	}
	for k := 1; k <= int(n); k++ {
		for _, down := range []time.Duration{0, 250 * time.Millisecond} {
			run(k, down)
		}
	}
}
