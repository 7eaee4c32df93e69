package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestDoubtSettles: a commit whose answer was lost and that the store could not settle is a
// doubt (doubt.go); once the server answers, the store adds its counters if and only if the
// commit did not land, and waits while it may still land.
func TestDoubtSettles(t *testing.T) {
	st := newTestStore(t)
	ctx := context.Background()
	conn := admin(t, st.Schema())
	xid := func(commit bool) int64 {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var x int64
		if err := tx.QueryRow(ctx, "SELECT txid_current()").Scan(&x); err != nil {
			t.Fatal(err)
		}
		// Its receipt, as the store's transactions write theirs (see resolve).
		if _, err := tx.Exec(ctx, "INSERT INTO effectfence_counters (shard, updated_at) VALUES ($1, now())", fmt.Sprintf("receipt/%d", x)); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	claim, done := []byte(`{"claim"}`), []byte(`{"done"}`)
	if _, err := conn.Exec(ctx, "INSERT INTO effectfence_records (intent, state, body) VALUES ('held', 'in_flight', $1), ('landed', 'done', $2), ('other', 'done', '{}')", claim, done); err != nil {
		t.Fatal(err)
	}
	other := admin(t, st.Schema()) // holds a transaction open
	pending, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Rollback(ctx)
	var inProgress int64
	if err := pending.QueryRow(ctx, "SELECT txid_current()").Scan(&inProgress); err != nil {
		t.Fatal(err)
	}
	one := fence.Counters{Admitted: 1}
	cases := []struct {
		name           string
		d              doubt
		added, settled bool
	}{
		{"transaction committed", doubt{xid: xid(true), delta: one}, false, true},
		// Its id committed, but the receipt says it named another transaction: the server
		// lost this one (killed before it flushed its COMMIT) and gave its id again.
		{"transaction id reused", doubt{xid: xid(true), shard: "receipt/elsewhere", delta: one}, true, true},
		{"transaction aborted", doubt{xid: xid(false), delta: one}, true, true},
		{"transaction in progress", doubt{xid: inProgress, delta: one}, false, false},
		{"statement landed", doubt{intent: "landed", body: done, claim: claim, delta: one}, false, true},
		{"statement may still land", doubt{intent: "held", body: done, claim: claim, delta: one}, false, false},
		{"statement fenced by another write", doubt{intent: "other", body: done, claim: claim, delta: one}, true, true},
		{"statement fenced, its transaction committed", doubt{xid: xid(true), intent: "other", body: done, claim: claim, delta: one}, false, true},
		{"statement fenced, its transaction aborted", doubt{xid: xid(false), intent: "other", body: done, claim: claim, delta: one}, true, true},
		{"statement may still land, its transaction aborted", doubt{xid: xid(false), intent: "held", body: done, claim: claim, delta: one}, false, false},
	}
	for i, c := range cases {
		before := countersOf(t, st)
		c.d.seq = int64(i + 1) // a shard of its own, as keep gives it
		if c.d.xid != 0 && c.d.shard == "" {
			c.d.shard = fmt.Sprintf("receipt/%d", c.d.xid)
		}
		c.d.at = time.Now()
		r := st.settle(ctx, c.d)
		settled := r == doubtSettled || r == doubtLanded || r == doubtUntold
		if landed := !c.added && c.settled; landed != (r == doubtLanded) {
			t.Errorf("%s: settled as landed %v; want %v", c.name, r == doubtLanded, landed)
		}
		added := countersOf(t, st).Admitted - before.Admitted
		want := uint64(0)
		if c.added {
			want = 1
		}
		if settled != c.settled || added != want {
			t.Errorf("%s: settled %v, added %d; want settled %v, added %d", c.name, settled, added, c.settled, want)
		}
	}
}

func countersOf(t *testing.T, st *Store) fence.Counters {
	t.Helper()
	var c fence.Counters
	if err := st.View(context.Background(), func(tx fence.Tx) error {
		var err error
		c, err = tx.Counters()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLostCommitThatDidNotLandCountsOnce: a one-statement commit is held in a frozen proxy
// and dropped with the connection (the server never runs it), and the transaction that would
// settle it fails too (the database is away): the store keeps the counters it carried. The
// holder's retry records the commit; the next settling finds the statement can no longer
// land and adds the counters, once.
func TestLostCommitThatDidNotLandCountsOnce(t *testing.T) {
	g := newCutRig(t)
	var added, landed atomic.Int64
	g.st.hook = func(stage string, _ uint32) {
		switch stage {
		case "doubt added":
			added.Add(1)
		case "doubt landed":
			landed.Add(1)
		}
	}
	ctx := context.Background()
	e := fence.New(g.st, fence.Config{LeaseTTL: time.Minute, SpoolDir: g.spool})
	before := g.counters()
	r := fence.Request{Intent: "never-landed", Tool: "charge", Args: []byte(`{"usd":1}`)}
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	g.p.Freeze()
	settled := make(chan error, 1)
	go func() {
		_, err := settle(e, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"ok"`)})
		settled <- err
	}()
	time.Sleep(200 * time.Millisecond) // the statement waits in the proxy
	g.p.Cut(time.Hour)                 // dropped with every connection; the database is away
	time.Sleep(200 * time.Millisecond)
	g.p.Heal()
	if err := <-settled; err != nil {
		t.Fatalf("settle: %v", err)
	}
	if st, err := e.Status(ctx, r.Intent); err != nil || st.State != fence.StateDone {
		t.Fatalf("after settle: %+v %v", st, err)
	}
	time.Sleep(doubtRetry) // a try that found the claim still there holds the next one off
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := g.counters().Admitted - before.Admitted; got != 1 || added.Load() != 1 || landed.Load() != 0 {
		t.Fatalf("admitted %d (settled: %d added, %d landed); want 1, by the store's settling", got, added.Load(), landed.Load())
	}
}

// TestDoubtSettledAtOnceWhenTheDatabaseIsBack: a write made while the database is away
// cannot ask about the store's doubts; the first write after it is back settles them. A
// failed ask held the next try off for doubtRetry, so a process that had written while the
// database was away (a background release of a lost claim, a heartbeat) left its counters
// unsettled for a second after the database came back.
func TestDoubtSettledAtOnceWhenTheDatabaseIsBack(t *testing.T) {
	g := newCutRig(t)
	ctx := context.Background()
	xid := rolledBack(t, g.st)
	before := g.counters()
	// A commit that carried one admission, whose answer was lost; it was rolled back.
	if _, ok := g.st.keep(CommitUnknownError{Xid: xid, delta: fence.Counters{Admitted: 1}}, doubt{}).(CommitUnknownError); !ok || g.st.doubts.n.Load() != 1 {
		t.Fatalf("the doubt was not kept: %d doubts", g.st.doubts.n.Load())
	}
	noop := func(fence.Tx) error { return nil }
	g.p.Cut(time.Hour)
	if err := g.st.Update(ctx, noop); err == nil {
		t.Fatal("an update with the database away succeeded")
	}
	if n := g.st.doubts.n.Load(); n != 1 {
		t.Fatalf("%d doubts after a write that could not ask; want 1", n)
	}
	g.p.Heal()
	if err := g.st.Update(ctx, noop); err != nil {
		t.Fatal(err)
	}
	if n := g.st.doubts.n.Load(); n != 0 {
		t.Fatalf("the first write after the database came back left %d doubts unsettled", n)
	}
	if got := g.counters().Admitted - before.Admitted; got != 1 {
		t.Fatalf("admitted %d; want the doubt's 1", got)
	}
}

// TestDoubtCountersAddedOnceWhenTheAddIsLost: settling a commit that did not land adds the
// counters it carried; when that add's own answer is lost (it landed), the next try must not
// add them again.
func TestDoubtCountersAddedOnceWhenTheAddIsLost(t *testing.T) {
	g := newCutRig(t)
	ctx := context.Background()
	xid := rolledBack(t, g.st)
	before := g.counters()
	g.st.keep(CommitUnknownError{Xid: xid, delta: fence.Counters{Admitted: 1}}, doubt{})
	lost := g.p.Lost()
	g.p.LoseAnswer(2, 0) // the settling's ask is answered; its add is not
	g.st.settleDoubts(ctx, true)
	if g.p.Lost() != lost+1 {
		t.Fatalf("no answer was lost (%d round trips)", g.p.RoundTrips())
	}
	if n := g.st.doubts.n.Load(); n != 1 {
		t.Fatalf("%d doubts after an add whose answer was lost; want it kept", n)
	}
	g.st.settleDoubts(ctx, true)
	if n := g.st.doubts.n.Load(); n != 0 {
		t.Fatalf("%d doubts left after the database answered", n)
	}
	if got := g.counters().Admitted - before.Admitted; got != 1 {
		t.Fatalf("admitted %d; want the lost commit's 1, once", got)
	}
}

// rolledBack is the id of a transaction that was rolled back.
func rolledBack(t *testing.T, st *Store) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := admin(t, st.Schema()).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var xid int64
	if err := tx.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	return xid
}

// TestSettlingDoubtsKeepsTheCallersDeadline: the server stops answering (netcut holds every
// byte, on new connections too) while the store has a doubt to settle, which it tries at the
// start of every write. A write bounded by its caller (here a renewal given wrap's least try,
// 1 s) must end by that bound, the doubt kept for a later try. Before, a try at settling gave
// itself 5 s whatever the caller's deadline: the renewal returned after 5 s, and a stopping
// engine's Close, which gives its last writes 5 s, took 12 s.
func TestSettlingDoubtsKeepsTheCallersDeadline(t *testing.T) {
	g := newCutRig(t)
	ctx := context.Background()
	e := fence.New(g.st, fence.Config{})
	adm, err := e.Prepare(ctx, fence.Request{Intent: "frozen-doubt", Tool: "charge", Args: []byte(`{"usd":1}`)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("claim: %+v %v", adm, err)
	}
	// A commit that carried one admission, whose answer was lost; it was rolled back.
	if _, ok := g.st.keep(CommitUnknownError{Xid: rolledBack(t, g.st), delta: fence.Counters{Admitted: 1}}, doubt{}).(CommitUnknownError); !ok || g.st.doubts.n.Load() != 1 {
		t.Fatalf("the doubt was not kept: %d doubts", g.st.doubts.n.Load())
	}
	g.p.Freeze()
	t.Cleanup(g.p.Heal)
	const bound = time.Second
	rctx, cancel := context.WithTimeout(ctx, bound)
	start := time.Now()
	_, err = e.Heartbeat(rctx, *adm.Ticket)
	took := time.Since(start)
	cancel()
	if err == nil {
		t.Fatal("a renewal was taken by a server that does not answer")
	}
	// The bound, and a margin for a busy machine that stays below the 5 s of before.
	if took > bound+3*time.Second {
		t.Fatalf("a renewal bounded to %s, the server not answering and a doubt to settle, returned after %s: %v", bound, took.Round(100*time.Millisecond), err)
	}
	if n := g.st.doubts.n.Load(); n != 1 {
		t.Fatalf("%d doubts after a try the server did not answer; want the one, kept", n)
	}
	g.p.Heal()
	if err := g.st.Update(ctx, func(fence.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := g.st.doubts.n.Load(); n != 0 {
		t.Fatalf("%d doubts once the server answers again; want them settled", n)
	}
}
