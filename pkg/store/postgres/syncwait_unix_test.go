//go:build unix

package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestClaimWhoseStandbyWaitIsEndedIsNotAdmittedWithoutIt: docs/postgres.md, "a claim or
// outcome is answered only once the standby has it". A claim's COMMIT waits for the
// synchronous standby, which stopped receiving, and its wait is ended: its backend is
// terminated (pg_terminate_backend: the connection closes), or its wait is cancelled
// (pg_cancel_backend, as an operator does to COMMITs hanging on a standby that is down: the
// COMMIT then succeeds with a warning). Either way PostgreSQL keeps the transaction,
// committed on the primary alone ("The transaction has already committed locally, but might
// not have been replicated to the standby"). The store learns that it committed (from the
// COMMIT's answer, or by asking: txid_status, or the record under the intent's lock for a
// one-statement claim) and it did, on the primary. Admitted then, the call runs; the primary
// dies, the standby is promoted without the claim, and the retry is admitted again: the
// effect twice. A claim must be admitted only once the standby has it.
func TestClaimWhoseStandbyWaitIsEndedIsNotAdmittedWithoutIt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		oneStatement bool
		end          string
	}{
		{"transaction terminated", false, "pg_terminate_backend"},
		{"one statement terminated", true, "pg_terminate_backend"},
		{"transaction cancelled", false, "pg_cancel_backend"},
		{"one statement cancelled", true, "pg_cancel_backend"},
	} {
		t.Run(c.name, func(t *testing.T) { claimWithEndedStandbyWait(t, c.oneStatement, c.end) })
	}
}

// claimWithEndedStandbyWait has a claim's COMMIT (one statement or a transaction) wait for a
// synchronous standby that stopped receiving, ends that wait with end (pg_terminate_backend,
// pg_cancel_backend), kills the primary and promotes the standby, and checks that the claim
// was not admitted and that its retry on the new primary is. settings are run on the primary
// before the store connects (ALTER DATABASE …).
func claimWithEndedStandbyWait(t *testing.T, oneStatement bool, end string, settings ...string) {
	primary, standby, s := failoverPair(t, settings...)
	ctx := context.Background()
	s.noFreshSpeculation.Store(!oneStatement)
	e := fence.New(keepOpen{s}, fence.Config{LeaseTTL: time.Minute})
	defer e.Close()
	if oneStatement {
		// A first call reads the server's clock: the next fresh claim is one statement.
		warm := fence.Request{Intent: "warm", Tool: "charge", Args: []byte(`{"usd":1}`)}
		adm, err := e.Prepare(ctx, warm)
		if err != nil || !adm.Fresh() {
			t.Fatalf("warm-up call: %+v %v", adm, err)
		}
		if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
			t.Fatal(err)
		}
	}
	r := fence.Request{Intent: "charge-1", Tool: "charge", Args: []byte(`{"usd":5}`)}
	disconnect(t, primary, standby)
	type result struct {
		adm fence.Admission
		err error
	}
	first := make(chan result, 1)
	go func() { adm, err := e.Prepare(ctx, r); first <- result{adm, err} }()
	var pid, xid []string
	waitUntil(t, "the claim to wait for the standby", func() bool {
		pid = primary.Query("postgres", "SELECT pid::text FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
		xid = primary.Query("postgres", "SELECT backend_xid::text FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
		return len(pid) > 0 && len(xid) > 0
	})
	primary.Exec("postgres", "SELECT "+end+"($1::int)", pid[0])
	// The claim is now committed on the primary alone. The store answers, or waits for
	// the standby in another transaction: whichever comes first, the primary then dies.
	var got result
	answered := false
	waitUntil(t, "the claim to be answered or to wait for the standby again", func() bool {
		select {
		case got = <-first:
			answered = true
			return true
		default:
		}
		return len(primary.Query("postgres", "SELECT pid::text FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND backend_xid::text <> $1", xid[0])) > 0
	})
	primary.Crash()
	if !answered {
		got = <-first
	}
	standby.Promote()
	if got := standby.Query("postgres", "SELECT count(*)::text FROM ledger.effectfence_records WHERE intent = 'charge-1'"); got[0] != "0" {
		t.Skipf("the promoted standby has the claim (%v): the standby received it after all", got)
	}
	other := fence.New(keepOpen{s}, fence.Config{LeaseTTL: time.Minute})
	defer other.Close()
	retry, err := other.Prepare(ctx, r)
	if got.err == nil && got.adm.Fresh() && err == nil && retry.Fresh() {
		t.Fatalf("the claim was admitted though the standby lacked it, and after the failover its retry was admitted again: the effect twice")
	}
	if got.err == nil && got.adm.Fresh() {
		t.Fatalf("the claim was admitted though the standby lacked it (the retry after the failover: %+v %v)", retry, err)
	}
	if fence.CodeOf(got.err) != fence.CodeStore {
		t.Fatalf("the claim: %+v %v, want a store error", got.adm, got.err)
	}
	if err != nil || !retry.Fresh() {
		t.Fatalf("the retry after the failover: %+v %v; want admitted (the call never ran)", retry, err)
	}
}
