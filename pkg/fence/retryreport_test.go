package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// TestRetriedReportThatLanded: a report of an outcome retried because an earlier attempt
// failed with the ledger's error (Settle's next round, a drain) that finds the outcome
// already recorded (the earlier attempt landed, its answer lost) is answered as that attempt
// would have been, and writes nothing; the same report made again by a caller, no retry, is
// refused lease_lost and kept as a late result, as before. A report that differs (another
// reason) is a late result either way.
func TestRetriedReportThatLanded(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []OutcomeKind{OutcomeRelease, OutcomeAbort, OutcomeLost} {
		e := New(NewMemoryStore(), Config{})
		r := Request{Intent: "order:" + string(kind), Tool: "charge", Args: json.RawMessage(`{"usd":1}`)}
		adm, err := e.Prepare(ctx, r)
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		o := Outcome{Kind: kind, Ticket: *adm.Ticket, Reason: "tool failed"}
		if _, err := e.apply(ctx, o, false); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		lates := func() int {
			n := 0
			if err := e.store.View(ctx, func(tx Tx) error {
				return tx.Events(r.Intent, func(ev Event) bool {
					if ev.Kind == EventLateResult {
						n++
					}
					return true
				})
			}); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if _, err := e.apply(ctx, o, true); err != nil || lates() != 0 {
			t.Fatalf("%s retried after it landed: %v, %d late results; want nil and none", kind, err, lates())
		}
		other := o
		other.Reason = "another reason"
		if _, err := e.apply(ctx, other, true); !errors.Is(err, ErrLeaseLost) || lates() != 1 {
			t.Fatalf("%s retried with another reason: %v, %d late results; want lease_lost, kept", kind, err, lates())
		}
		if _, err := e.apply(ctx, o, false); !errors.Is(err, ErrLeaseLost) || lates() != 2 {
			t.Fatalf("%s made again, no retry: %v, %d late results; want lease_lost, kept", kind, err, lates())
		}
	}
}

// TestRetriedStaleCommit: a commit that found its read set moved recorded the intent failed
// and answered stale_read_set; retried because its answer was lost, it gets that answer
// again and writes nothing, while the same commit made again, no retry, is refused
// lease_lost as before.
func TestRetriedStaleCommit(t *testing.T) {
	ctx := context.Background()
	e := New(NewMemoryStore(), Config{})
	r := Request{Intent: "order:stale", Tool: "charge", Args: json.RawMessage(`{"usd":1}`), ReadSet: []ReadSetEntry{{Domain: "acct", Seq: 0}}}
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	mover, err := e.Prepare(ctx, Request{Intent: "move", Tool: "move", Domain: "acct"})
	if err != nil || !mover.Fresh() {
		t.Fatal(mover, err)
	}
	if _, err := e.Commit(ctx, *mover.Ticket, nil); err != nil {
		t.Fatal(err)
	}
	o := Outcome{Kind: OutcomeCommit, Ticket: *adm.Ticket, Result: json.RawMessage(`"ok"`)}
	_, first := e.apply(ctx, o, false)
	var stale StaleReadSetError
	if !errors.As(first, &stale) || !stale.Executed {
		t.Fatalf("the commit: %v; want stale_read_set, executed", first)
	}
	_, again := e.apply(ctx, o, true)
	if fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("the retried commit: %v; want %v", again, first)
	}
	if _, err := e.apply(ctx, o, false); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the commit made again, no retry: %v; want lease_lost", err)
	}
	if st, err := e.Status(ctx, r.Intent); err != nil || st.State != StateFailed {
		t.Fatalf("status %+v %v; want failed", st, err)
	}
}
