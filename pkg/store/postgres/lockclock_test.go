package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestLeaseClockReadAfterTheIntentLock (docs/RELIABILITY.md, "Ledger integrity and clocks"): a
// claim that waited longer than a lease for the intent's lock is granted a lease counted from
// when it got the lock. Counted from when it began to wait, the lease had lapsed before the
// effect started: the next attempt found an in-flight claim with a lapsed lease and fenced it
// as unknown (or, re-run safe with its holder out of sight, ran it again).
func TestLeaseClockReadAfterTheIntentLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testSchema(t)
	const lease = time.Second
	eng := fence.New(openSchema(t, schema), fence.Config{LeaseTTL: lease})
	t.Cleanup(func() { eng.Close() })
	other := fence.New(openSchema(t, schema), fence.Config{LeaseTTL: lease})
	t.Cleanup(func() { other.Close() })
	req := fence.Request{Intent: "clock:lock", Tool: "charge_card", Args: []byte(`{"amount":1}`)}

	// Another transaction holds the intent's lock (a slow writer, a stalled connection).
	conn := admin(t, schema)
	lockTx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lockTx.Rollback(ctx)
	if _, err := lockTx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(eng.Store().(*Store).Schema(), "intent", req.Intent)); err != nil {
		t.Fatal(err)
	}
	type admitted struct {
		adm fence.Admission
		err error
	}
	done := make(chan admitted, 1)
	go func() {
		adm, err := eng.Prepare(ctx, req)
		done <- admitted{adm, err}
	}()
	time.Sleep(lease + lease/2)
	select {
	case a := <-done:
		t.Fatalf("prepare did not wait for the intent's lock: %+v %v", a.adm, a.err)
	default:
	}
	var released time.Time
	if err := lockTx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&released); err != nil {
		t.Fatal(err)
	}
	if err := lockTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || !a.adm.Fresh() {
		t.Fatalf("prepare after the lock: %+v %v", a.adm, a.err)
	}
	if until := a.adm.Ticket.LeaseUntil; until.Before(released.Add(lease / 2)) {
		t.Fatalf("lease until %s, but the lock was only released at %s: the lease was counted from before the wait", until, released)
	}
	if _, err := other.Prepare(ctx, req); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("a duplicate right after the claim: %v; want intent_in_flight", err)
	}
}
