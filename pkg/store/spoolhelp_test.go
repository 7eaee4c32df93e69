package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

// spoolWithTheLedgerDown settles the commit of tk with result while ds is down, which keeps it
// in the spool (the test fails otherwise), and returns where; ds is left down.
func spoolWithTheLedgerDown(t *testing.T, eng *fence.Engine, ds *fencetest.DownStore, tk fence.Ticket, result string) string {
	t.Helper()
	ds.Down.Store(true)
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := eng.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: tk, Result: []byte(result)})
	var sp fence.SpooledError
	if !errors.As(err, &sp) {
		t.Fatalf("settle of %s with the ledger down: %v; want it spooled", tk.Intent, err)
	}
	return sp.Path
}
