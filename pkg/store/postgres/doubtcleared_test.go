package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestClaimInDoubtClearedElsewhereCountsOnce: a one-statement claim whose answer is lost while
// the database cannot be reached lands on the server, with the counters it carried (the
// admission before it). Before its process can settle that doubt, an operator on another
// process clears the claim (ledger clear): the record is gone. The store must not read that
// as "never recorded" and add the counters a second time.
func TestClaimInDoubtClearedElsewhereCountsOnce(t *testing.T) {
	untilTheStatementLands(t, func(try int) bool {
		schema := testSchema(t)
		var armed, down atomic.Bool
		var cut atomic.Int64
		ctx := context.Background()
		watch := newBackendWatch(t)
		s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, MaxConns: 4, wrapConn: func(c net.Conn) net.Conn {
			return downConn{cutConn: newCutConn(c, &armed, &cut, watch), down: &down}
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var arm atomic.Bool
		st := &stages{on: func(stage string, _ uint32) {
			if stage == "speculate claim" && arm.CompareAndSwap(true, false) {
				armed.Store(true)
			}
		}}
		s.hook = st.hook
		e := fence.New(s, fence.Config{})
		if adm, err := e.Prepare(ctx, fence.Request{Intent: "warm", Tool: "t"}); err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		arm.Store(true)
		r := fence.Request{Intent: fmt.Sprintf("charge:claim-cleared-%d", try), Tool: "charge", Args: []byte(`{"amount":4}`)}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = e.Prepare(cctx, r)
		var unknown CommitUnknownError
		if !errors.As(err, &unknown) || !unknown.CountersKept() {
			t.Fatalf("a claim with the database gone: %v", err)
		}
		if recordState(t, admin(t, schema), r.Intent) == "" {
			down.Store(false)
			return false // its clock was stale: it wrote nothing (untilTheStatementLands)
		}
		// The operator, on a process of its own that reaches the database.
		op := fence.New(openSchema(t, schema), fence.Config{})
		if _, err := op.Clear(ctx, r.Intent, "ops", "checked the charge: it never ran"); err != nil {
			t.Fatal(err)
		}
		down.Store(false)
		for deadline := time.Now().Add(10 * time.Second); s.doubts.n.Load() > 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			s.settleDoubts(ctx, true)
		}
		if s.doubts.n.Load() > 0 {
			t.Fatal("the doubt is still open")
		}
		// The claim carried the warm-up's admission, and it landed: one admission in all.
		if n := admitted(t, op); n != 1 {
			t.Fatalf("admitted %d, want 1 (the warm-up, carried by the claim that landed); settled landed %d, added %d", n, st.count("doubt landed"), st.count("doubt added"))
		}
		return true
	})
}

// TestCommitLostAndClearedElsewhereCountsOnce: a one-statement commit lands, with the counters
// it carried (its claim's admission), but its answer is lost; before the transaction that
// follows it up reads the intent, an operator on another process clears it. The transaction
// must not add those counters a second time.
func TestCommitLostAndClearedElsewhereCountsOnce(t *testing.T) {
	g := newCutRig(t)
	ctx := context.Background()
	r := fence.Request{Intent: "commit-lost-cleared", Tool: "charge", Args: []byte(`{"usd":1}`)}
	var cleared atomic.Bool
	g.st.hook = func(stage string, _ uint32) {
		if stage == "speculation lost" && cleared.CompareAndSwap(false, true) {
			if _, err := g.other.Clear(ctx, r.Intent, "ops", "checked the charge by hand"); err != nil {
				t.Error(err)
			}
		}
	}
	e := fence.New(g.st, fence.Config{LeaseTTL: time.Minute, SpoolDir: g.spool})
	before := g.counters()
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	g.p.LoseAnswer(1, 0)
	_, err = e.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
	t.Logf("commit: %v", err)
	if !cleared.Load() || g.p.Lost() != 1 {
		t.Fatalf("the commit's statement was not lost (cleared %v, lost %d)", cleared.Load(), g.p.Lost())
	}
	if err := g.settleDoubts(ctx, e); err != nil {
		t.Fatal(err)
	}
	if got := g.counters().Admitted - before.Admitted; got != 1 {
		t.Fatalf("admitted %d, want 1", got)
	}
}
