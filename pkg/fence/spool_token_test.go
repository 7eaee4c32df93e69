package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

// Two ledgers whose outcomes wait in one spool (a URL-named spool of one PostgreSQL URL that
// two environments point at two schemas, Config.SpoolShared) each make a claim of one intent
// with the same token (their counters are their own: both ledgers' first claim is token 1),
// and both ledgers fail when the outcomes come. Each outcome is answered as kept in the spool,
// so each must be there to be recorded. Before, the spool file was named after the intent and
// token only: the second replaced the first, whose commit was never recorded.
func TestOutcomesOfTwoLedgersClaimsWithOneTokenAreBothKept(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var downs [2]*fencetest.DownStore
	var engs [2]*fence.Engine
	var tickets [2]fence.Ticket
	for i := range engs {
		downs[i] = &fencetest.DownStore{Store: fence.NewMemoryStore()}
		engs[i] = fence.New(downs[i], fence.Config{SpoolDir: dir, SpoolShared: true, LeaseTTL: time.Hour})
		defer engs[i].Close()
		adm, err := engs[i].Prepare(ctx, fence.Request{Intent: "x", Tool: "t", Args: []byte(`{}`)})
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare: %+v %v", adm, err)
		}
		tickets[i] = *adm.Ticket
	}
	if tickets[0].Token != tickets[1].Token {
		t.Fatalf("tokens %d and %d: the test wants equal ones", tickets[0].Token, tickets[1].Token)
	}
	for i := range engs {
		downs[i].Down.Store(true)
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := engs[i].Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: tickets[i], Result: []byte(`"done"`)})
		cancel()
		var sp fence.SpooledError
		if !errors.As(err, &sp) {
			t.Fatalf("ledger %d: settle: %v, want it kept in the spool", i, err)
		}
	}
	for i := range engs {
		downs[i].Down.Store(false)
	}
	for i := range engs {
		if _, err := engs[i].DrainSpool(ctx); err != nil {
			t.Fatalf("ledger %d: drain: %v", i, err)
		}
	}
	for i := range engs {
		s, err := engs[i].Status(ctx, "x")
		if err != nil || s.State != fence.StateDone {
			t.Errorf("ledger %d: intent %s %v after the drains, want done: its commit, answered as kept, was lost", i, s.State, err)
		}
	}
}
