package fence_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// unanswering is a store whose next transaction, once armed, is never answered: it waits
// until its context ends, as one sent over a connection that no longer answers (a PostgreSQL
// server that failed over, a NAT that forgot the connection: no reset, the kernel
// retransmitting for minutes).
type unanswering struct {
	fence.Store
	armed atomic.Bool
}

func (u *unanswering) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if u.armed.CompareAndSwap(true, false) {
		<-ctx.Done()
		return ctx.Err()
	}
	return u.Store.Update(ctx, fn)
}

// TestSettleOverAConnectionThatNoLongerAnswersIsTriedAgain: a try at recording an outcome that
// the ledger never answers is ended and tried again (the outcome kept in the spool
// meanwhile), not waited for until the Settle's context ends. Before, the first try held the
// Settle for its whole wait (wrap's: the lease) with the outcome in neither the ledger nor the
// spool, though the ledger answered a new connection: a real wrap whose pooled PostgreSQL
// connections were stopped behind a TCP proxy kept its commit unrecorded for the 30 s watched,
// its heartbeat stopped and its lease running out, and a wrap killed meanwhile lost the
// outcome altogether.
func TestSettleOverAConnectionThatNoLongerAnswersIsTriedAgain(t *testing.T) {
	st := &unanswering{Store: fence.NewMemoryStore()}
	spool := t.TempDir()
	eng := fence.New(st, fence.Config{LeaseTTL: time.Minute, SpoolDir: spool})
	ctx := context.Background()
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "i", Tool: "t"})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	st.armed.Store(true)
	wait, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	cert, err := eng.Settle(wait, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`{"ok":true}`)})
	if err != nil || cert == nil {
		t.Fatalf("the commit was not recorded while the ledger answered every try after the first: %v", err)
	}
	rec, err := eng.Status(ctx, "i")
	if err != nil || rec.State != fence.StateDone {
		t.Fatalf("the intent is %+v (%v), not done", rec, err)
	}
	left, err := os.ReadDir(spool)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range left {
		if f.Name() != ".lock" {
			t.Errorf("%s left in the spool though the ledger recorded the outcome", f.Name())
		}
	}
}
