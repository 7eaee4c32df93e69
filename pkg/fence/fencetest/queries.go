package fencetest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// ledgerDump is everything a query could change in a ledger, as text: every record, every
// audit event, the counters, the floor, and the named domains' rows.
func ledgerDump(t *testing.T, st fence.Store, domains []string) string {
	t.Helper()
	var b strings.Builder
	err := st.View(ctx, func(tx fence.Tx) error {
		if err := tx.Scan(fence.Filter{}, func(r *fence.Record) bool {
			fmt.Fprintf(&b, "record %q %s token=%d lease=%s updated=%s\n", r.Intent, r.State, r.Token, r.LeaseUntil.UTC(), r.UpdatedAt.UTC())
			return true
		}); err != nil {
			return err
		}
		if err := tx.Events("", func(ev fence.Event) bool {
			fmt.Fprintf(&b, "event %q %s %s\n", ev.Intent, ev.Kind, ev.At.UTC())
			return true
		}); err != nil {
			return err
		}
		c, err := tx.Counters()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "counters %+v\n", c)
		floor, err := tx.DomainFloor()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "floor %d\n", floor)
		sorted := append([]string(nil), domains...)
		sort.Strings(sorted)
		for _, d := range sorted {
			seq, found, err := tx.DomainSeq(d)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "domain %q %d %v\n", d, seq, found)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// runDurableQueries: Status, Current and Stats, asked by another process (a new engine over
// the reopened ledger) about intents and domains the ledger holds and does not hold, about a
// claim whose lease lapsed while its holder lives, and about an expired outcome, leave the
// ledger on disk exactly as it was: no record, row, event or counter appears or changes.
func runDurableQueries(t *testing.T, reopen Reopener) {
	open := reopen(t)
	alive := func(string) fence.Liveness { return fence.Alive }
	st1 := open()
	e1 := fence.New(st1, fence.Config{Owner: "host/1/1", Liveness: alive, LeaseTTL: 50 * time.Millisecond, ResultTTL: 50 * time.Millisecond})
	mustCommit(t, e1, mustFresh(t, e1, fence.Request{Intent: "q:done", Tool: "t", Domain: "q:dom"}), `1`)
	mustFresh(t, e1, fence.Request{Intent: "q:held", Tool: "t", Domain: "q:dom"})
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(120 * time.Millisecond) // the claim's lease lapses and the done outcome expires

	domains := []string{"q:dom", "q:ghost-domain", "q:'; DELETE FROM effectfence_domains; --"}
	st2 := open()
	before := ledgerDump(t, st2, domains)
	e2 := fence.New(st2, fence.Config{Owner: "host/2/1", Liveness: alive, LeaseTTL: 50 * time.Millisecond, ResultTTL: 50 * time.Millisecond})
	for _, intent := range []string{"q:done", "q:held", "q:ghost", "q:\u2028", strings.Repeat("q", fence.MaxIntentLen+1)} {
		if _, err := e2.Status(ctx, intent); err != nil {
			t.Fatalf("status %q: %v", intent, err)
		}
	}
	if s, _ := e2.Status(ctx, "q:held"); s.State != fence.StateInFlight {
		t.Fatalf("status of the lapsed claim = %s; a query reports, it does not judge", s.State)
	}
	if s, _ := e2.Status(ctx, "q:done"); s.State != fence.StateNone {
		t.Fatalf("status of the expired outcome = %s, want none", s.State)
	}
	for _, d := range domains {
		if _, err := e2.Current(ctx, d); err != nil {
			t.Fatalf("current %q: %v", d, err)
		}
	}
	if _, err := e2.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	st3 := open()
	defer st3.Close()
	if after := ledgerDump(t, st3, domains); after != before {
		t.Fatalf("queries changed the ledger:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// runDurableStaleAcrossRestart: a claim made on a read set, whose process died before it
// committed, while another process moved a domain it read: the holder's commit, arriving
// after the restart, is checked against the read set again and the intent becomes failed
// (the effect ran on stale state), not done.
func runDurableStaleAcrossRestart(t *testing.T, reopen Reopener) {
	open := reopen(t)
	st1 := open()
	e1 := fence.New(st1, fence.Config{Owner: "host/1/1", Liveness: func(string) fence.Liveness { return fence.Alive }})
	r := fence.Request{Intent: "restart:decide", Tool: "t", Domain: "restart:target",
		ReadSet: []fence.ReadSetEntry{{Domain: "restart:watched", Seq: 0}, {Domain: "restart:target", Seq: 0}}}
	tk := mustFresh(t, e1, r)
	if err := e1.Close(); err != nil { // the process stops with the effect running
		t.Fatal(err)
	}

	st2 := open()
	defer st2.Close()
	dead := func(o string) fence.Liveness {
		if o == "host/1/1" {
			return fence.Dead
		}
		return fence.Alive
	}
	e2 := fence.New(st2, fence.Config{Owner: "host/2/1", Liveness: dead})
	mustCommit(t, e2, mustFresh(t, e2, fence.Request{Intent: "restart:mover", Tool: "t", Domain: "restart:watched"}), `1`)
	if _, err := e2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := e2.Commit(ctx, tk, []byte(`"ran"`))
	var stale fence.StaleReadSetError
	if !errors.As(err, &stale) || !stale.Executed || stale.Domain != "restart:watched" {
		t.Fatalf("late commit on a moved read set = %v; want stale_read_set with Executed", err)
	}
	if s, err := e2.Status(ctx, r.Intent); err != nil || s.State != fence.StateFailed {
		t.Fatalf("status = %s, %v; want failed", s.State, err)
	}
	if _, err := e2.Prepare(ctx, r); !errors.Is(err, fence.ErrPriorFailure) {
		t.Fatalf("a retry after the stale commit: %v; want prior_failure", err)
	}
}
