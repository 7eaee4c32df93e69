package ledger_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestAbandonedClaimIsListed: a claim whose live holder never settles does not stay in_flight:
// once its lease has lapsed, opening the ledger (as every `ledger` command does) makes it
// unknown, and the fenced listing shows it with the reason.
func TestAbandonedClaimIsListed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	opts := store.Options{Ledger: path, LeaseTTL: 100 * time.Millisecond}
	holder, err := store.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Prepare(ctx, fence.Request{Intent: "charge:abandoned", Tool: "charge"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the holder is alive but never settles

	op, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	fenced, _ := ledger.ParseState("fenced")
	recs, err := ledger.List(ctx, op.Store(), fenced)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Intent != "charge:abandoned" || recs[0].State != fence.StateUnknown || !strings.Contains(recs[0].Reason, "lease lapsed") || !recs[0].Healable() {
		t.Fatalf("fenced listing = %+v; want the abandoned claim as unknown (lease lapsed, healable)", recs)
	}
	if inflight, _ := ledger.List(ctx, op.Store(), []fence.State{fence.StateInFlight}); len(inflight) != 0 {
		t.Fatalf("still in flight after its lease: %+v", inflight)
	}
}
