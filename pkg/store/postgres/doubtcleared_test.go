package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
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

// TestCommitLostAndClearedElsewhereSaysItLanded: a one-statement commit lands, its answer lost
// on a real cut of the connection, and an operator's process clears the intent before the
// store's follow-up transaction reads it. The retried commit is refused lease_lost (the record
// is gone), but its text said "the intent's record is unchanged", which an operator reads as
// the outcome never recorded, though it was (the counters row of the statement's connection
// says so). It says the earlier attempt was recorded; the report is still kept as a late
// result. A commit lost the same way and not cleared is answered with its cert, as before.
func TestCommitLostAndClearedElsewhereSaysItLanded(t *testing.T) {
	g := newCutRig(t)
	ctx := context.Background()
	r := fence.Request{Intent: "commit-lost-cleared-said", Tool: "charge", Args: []byte(`{"usd":1}`)}
	var cleared atomic.Bool
	g.st.hook = func(stage string, _ uint32) {
		if stage == "speculation lost" && cleared.CompareAndSwap(false, true) {
			if _, err := g.other.Clear(ctx, r.Intent, "ops", "checked the charge by hand"); err != nil {
				t.Error(err)
			}
		}
	}
	e := fence.New(g.st, fence.Config{LeaseTTL: time.Minute, SpoolDir: g.spool})
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	g.p.LoseAnswer(1, 0)
	_, err = e.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
	if !cleared.Load() || g.p.Lost() != 1 {
		t.Fatalf("the commit's statement was not lost (cleared %v, lost %d)", cleared.Load(), g.p.Lost())
	}
	var lost fence.LeaseLostError
	if !errors.As(err, &lost) {
		t.Fatalf("commit: %v, want %v", err, fence.ErrLeaseLost)
	}
	if strings.Contains(err.Error(), "unchanged") || !strings.Contains(err.Error(), "an earlier attempt of this report, whose answer was lost, was recorded") {
		t.Errorf("commit: %v; want it to say that its earlier attempt was recorded", err)
	}
	var late []fence.Event
	if err := g.st.View(ctx, func(tx fence.Tx) error {
		return tx.Events(r.Intent, func(ev fence.Event) bool {
			if ev.Kind == fence.EventLateResult {
				late = append(late, ev)
			}
			return true
		})
	}); err != nil {
		t.Fatal(err)
	}
	if len(late) != 1 || !strings.Contains(late[0].Reason, "was recorded") {
		t.Errorf("late results: %+v; want one, saying the earlier attempt was recorded", late)
	}

	// A commit that carries no counters (the engine's were flushed before it) leaves the
	// row as it was whether or not it landed: nothing tells, and the text says so.
	r3 := fence.Request{Intent: "commit-lost-cleared-uncounted", Tool: "charge", Args: []byte(`{"usd":3}`)}
	adm, err = e.Prepare(ctx, r3)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cleared.Store(false)
	r.Intent = r3.Intent // the intent the hook clears
	g.p.LoseAnswer(1, 0)
	_, err = e.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
	if !cleared.Load() || g.p.Lost() != 2 {
		t.Fatalf("the uncounted commit's statement was not lost (cleared %v, lost %d)", cleared.Load(), g.p.Lost())
	}
	if !errors.As(err, &lost) || !strings.Contains(err.Error(), "may have been recorded before the record changed (the ledger cannot tell)") {
		t.Errorf("uncounted commit: %v; want lease_lost saying the ledger cannot tell", err)
	}

	// Not cleared: the retry finds its own done record and answers its cert.
	r2 := fence.Request{Intent: "commit-lost-kept", Tool: "charge", Args: []byte(`{"usd":2}`)}
	adm, err = e.Prepare(ctx, r2)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	g.p.LoseAnswer(1, 0)
	if cert, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil || cert == nil || g.p.Lost() != 3 {
		t.Fatalf("a lost commit not cleared: %v %v (lost %d)", cert, err, g.p.Lost())
	}
}

// TestCommitInDoubtClearedElsewhereSaysItLanded: a commit's transaction reaches COMMIT, the
// answer is lost and the server cannot be asked (the database goes away with the
// connection): Commit answers that it may or may not be recorded. An operator's process
// clears the intent; the database comes back and the holder settles the outcome again. The
// store learns, settling its doubt first (txid_status), that the commit landed: the refusal
// (lease_lost, the record is gone) says the earlier attempt was recorded, where it said "the
// intent's record is unchanged". A commit whose COMMIT never reached the server, the intent
// then cleared, is refused saying the record is unchanged, as it is.
func TestCommitInDoubtClearedElsewhereSaysItLanded(t *testing.T) {
	schema := testSchema(t)
	var armed, want, down atomic.Bool
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
	s.noSpeculation.Store(true) // COMMIT's answer, not a one-statement commit's
	s.hook = func(stage string, _ uint32) {
		if stage == "commit" && want.CompareAndSwap(true, false) {
			armed.Store(true)
		}
	}
	e := fence.New(s, fence.Config{SpoolDir: t.TempDir()})
	op := fence.New(openSchema(t, schema), fence.Config{})
	r := fence.Request{Intent: "charge:in-doubt-cleared", Tool: "charge", Args: []byte(`{"amount":4}`)}
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	want.Store(true)
	_, err = e.Commit(ctx, *adm.Ticket, []byte(`"charged"`))
	var unknown CommitUnknownError
	if !errors.As(err, &unknown) {
		t.Fatalf("commit with the database gone: %v", err)
	}
	if _, err := op.Clear(ctx, r.Intent, "ops", "checked the charge by hand"); err != nil {
		t.Fatal(err)
	}
	down.Store(false)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	o := fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"charged"`)}
	_, err = e.Settle(sctx, o)
	if !errors.Is(err, fence.ErrLeaseLost) || strings.Contains(err.Error(), "unchanged") ||
		!strings.Contains(err.Error(), "an earlier attempt of this report, whose answer was lost, was recorded") {
		t.Errorf("settle after the clear: %v; want lease_lost saying the earlier attempt was recorded", err)
	}

	// The same with a commit that carried no counters (the engine's were flushed before it):
	// the store keeps no doubt to settle, and nothing tells whether it landed.
	r3 := fence.Request{Intent: "charge:in-doubt-uncounted", Tool: "charge", Args: []byte(`{"amount":6}`)}
	adm, err = e.Prepare(ctx, r3)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want.Store(true)
	if _, err = e.Commit(ctx, *adm.Ticket, []byte(`"charged"`)); !errors.As(err, &unknown) {
		t.Fatalf("uncounted commit with the database gone: %v", err)
	}
	if _, err := op.Clear(ctx, r3.Intent, "ops", "checked the charge by hand"); err != nil {
		t.Fatal(err)
	}
	down.Store(false)
	_, err = e.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"charged"`)})
	if !errors.Is(err, fence.ErrLeaseLost) || !strings.Contains(err.Error(), "may have been recorded before the record changed (the ledger cannot tell)") {
		t.Errorf("settle of an uncounted commit after the clear: %v; want lease_lost saying the ledger cannot tell", err)
	}

	// Cleared while the holder ran, its COMMIT never sent: nothing of it was recorded.
	r2 := fence.Request{Intent: "charge:cleared-unsent", Tool: "charge", Args: []byte(`{"amount":5}`)}
	adm, err = e.Prepare(ctx, r2)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if _, err := op.Clear(ctx, r2.Intent, "ops", "checked the charge by hand"); err != nil {
		t.Fatal(err)
	}
	_, err = e.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"charged"`)})
	if !errors.Is(err, fence.ErrLeaseLost) || !strings.HasSuffix(err.Error(), "the intent's record is unchanged") {
		t.Errorf("settle of a commit never sent, after the clear: %v; want lease_lost saying the record is unchanged", err)
	}
}

// TestCommitStatementInDoubtClearedElsewhereSaysItLanded: as
// TestCommitInDoubtClearedElsewhereSaysItLanded, with the commit sent as one statement
// (spec.go) and its follow-up transaction failing too, the database away: the store settles
// the statement's doubt by its connection's counters row once the database is back, and the
// holder's settle, refused for the cleared record, says the earlier attempt was recorded.
func TestCommitStatementInDoubtClearedElsewhereSaysItLanded(t *testing.T) {
	schema := testSchema(t)
	var armed, want, down atomic.Bool
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
	st := &stages{on: func(stage string, _ uint32) {
		if stage == "speculate" && want.CompareAndSwap(true, false) {
			armed.Store(true)
		}
	}}
	s.hook = st.hook
	e := fence.New(s, fence.Config{SpoolDir: t.TempDir()})
	op := fence.New(openSchema(t, schema), fence.Config{})
	r := fence.Request{Intent: "charge:statement-in-doubt-cleared", Tool: "charge", Args: []byte(`{"amount":4}`)}
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	want.Store(true)
	_, err = e.Commit(ctx, *adm.Ticket, []byte(`"charged"`))
	var unknown CommitUnknownError
	if !errors.As(err, &unknown) || st.count("speculation lost") != 1 {
		t.Fatalf("a one-statement commit with the database gone: %v (lost %d)", err, st.count("speculation lost"))
	}
	if recordState(t, admin(t, schema), r.Intent) != fence.StateDone {
		t.Fatal("the statement did not land")
	}
	if _, err := op.Clear(ctx, r.Intent, "ops", "checked the charge by hand"); err != nil {
		t.Fatal(err)
	}
	down.Store(false)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = e.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"charged"`)})
	if !errors.Is(err, fence.ErrLeaseLost) || !strings.Contains(err.Error(), "an earlier attempt of this report, whose answer was lost, was recorded") {
		t.Errorf("settle after the clear: %v; want lease_lost saying the earlier attempt was recorded", err)
	}
}
