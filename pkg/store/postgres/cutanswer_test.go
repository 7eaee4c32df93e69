package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
)

// The answer of one round trip lost, for every round trip of every call a holder makes: the
// request reaches the server whole and the server runs it (a COMMIT in it commits), but the
// proxy drops the answer and the connection (netcut.LoseAnswer). Either the server is
// reachable again at once (the store asks it on another connection), or it is away for a
// while (down: the store cannot ask, and the caller retries, as wrap does through Settle).
// After each, with the database back, the ledger must say what happened exactly once.

// cutRig is a store on a schema of its own, reached through a proxy that can lose answers.
type cutRig struct {
	t     *testing.T
	p     *netcut.Proxy
	st    *Store
	spool string
	n     int // cases run, for distinct intents
	// other is another process's engine, on a store that reaches the database directly.
	other *fence.Engine
	// moveDuring, when set, is a domain other moves while a report is in doubt.
	moveDuring string
}

// move takes the next number of domain through other (an admission and its commit).
func (g *cutRig) move(name, intent, domain string) {
	g.t.Helper()
	ctx := context.Background()
	adm, err := g.other.Prepare(ctx, fence.Request{Intent: intent, Tool: "move", Domain: domain})
	if err != nil || !adm.Fresh() {
		g.failf(name, "moving domain %s: %+v %v", domain, adm, err)
	}
	if _, err := g.other.Commit(ctx, *adm.Ticket, nil); err != nil {
		g.failf(name, "moving domain %s: %v", domain, err)
	}
}

func newCutRig(t *testing.T) *cutRig {
	t.Helper()
	p, err := netcut.NewPostgres(pgHost(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	st := openThrough(t, p, testSchema(t))
	other := fence.New(openSchema(t, st.Schema()), fence.Config{})
	return &cutRig{t: t, p: p, st: st, spool: t.TempDir(), other: other}
}

// duringDoubt runs settle (a holder's Settle) and, once the answer is lost, sends a
// duplicate of r from another process that reaches the database directly: whether the
// holder's report landed or not, the duplicate is refused or replayed, never admitted. What
// it was answered is added to want.
func (g *cutRig) duringDoubt(name string, lostBefore int64, r fence.Request, want *fence.Counters, settle func()) {
	g.t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); settle() }()
	for g.p.Lost() == lostBefore {
		select {
		case <-done:
			return // nothing was lost (k beyond the call's round trips)
		case <-time.After(time.Millisecond):
		}
	}
	adm, err := g.other.Prepare(context.Background(), r)
	switch {
	case err == nil && !adm.Fresh():
		want.Replayed++
	case errors.Is(err, fence.ErrInFlight):
		want.InFlight++
	case errors.Is(err, fence.ErrPriorFailure):
		want.PriorFailure++
	default:
		<-done
		g.failf(name, "a duplicate while the holder's report was in doubt: %+v %v", adm, err)
	}
	if g.moveDuring != "" {
		// Another process moves a domain the call read, while its commit is in doubt.
		g.move(name, r.Intent+":mover", g.moveDuring)
		want.Admitted++
	}
	<-done
	if err := g.other.Flush(context.Background()); err != nil {
		g.failf(name, "flushing the other's counters: %v", err)
	}
}

// counters reads the ledger's counters.
func (g *cutRig) counters() fence.Counters {
	g.t.Helper()
	var c fence.Counters
	err := g.st.View(context.Background(), func(tx fence.Tx) error {
		var err error
		c, err = tx.Counters()
		return err
	})
	if err != nil {
		g.t.Fatalf("reading the counters: %v", err)
	}
	return c
}

// events counts the intent's audit events by kind.
func (g *cutRig) events(intent string) map[string]int {
	g.t.Helper()
	kinds := map[string]int{}
	err := g.st.View(context.Background(), func(tx fence.Tx) error {
		return tx.Events(intent, func(ev fence.Event) bool { kinds[ev.Kind]++; return true })
	})
	if err != nil {
		g.t.Fatalf("reading the audit trail: %v", err)
	}
	return kinds
}

// cutOps are the calls whose round trips are cut: a claim (Prepare of a fresh intent) as a
// transaction and (the store having read the server's clock by then) as one statement, its commit as one statement and as a transaction, a commit that finds its read set moved, one
// whose read set moves while it is in doubt, release, abort, lost and a heartbeat.
var cutOps = []string{"claim-tx", "claim", "commit", "commit-tx", "commit-stale", "commit-moved", "release", "abort", "lost", "heartbeat"}

// failf is for t.Fatalf inside a case: the case's name leads.
func (g *cutRig) failf(name, format string, args ...any) {
	g.t.Helper()
	g.t.Fatalf(name+": "+format, args...)
}

// keepOpen is the store, left open when an engine over it closes (the rig's next case uses it).
type keepOpen struct{ *Store }

func (keepOpen) Close() error { return nil }

// settle is what a holder does with an outcome (wrap's way): Settle, which keeps it in the
// spool and retries until the ledger answers, within 20 s.
func settle(e *fence.Engine, o fence.Outcome) (*fence.Cert, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return e.Settle(ctx, o)
}

// retryUncoded retries a call while it fails without a fence code (the ledger is away), as a
// caller that still holds its ticket does, within 20 s.
func retryUncoded(call func() error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := call()
		var coded fence.Coded
		if err == nil || errors.As(err, &coded) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cutCase runs op once with the answer of its k-th round trip lost (k 0: nothing lost) and the
// database then away for down, and checks the ledger and the answers. It returns how many
// round trips op took.
func (g *cutRig) cutCase(op string, k int, down time.Duration) int64 {
	g.t.Helper()
	g.n++
	name := fmt.Sprintf("%s k=%d down=%s", op, k, down)
	ctx := context.Background()
	e := fence.New(keepOpen{g.st}, fence.Config{LeaseTTL: time.Minute, SpoolDir: g.spool})
	defer e.Close() // its background release of a lost claim ends with the case
	before := g.counters()
	r := fence.Request{Intent: fmt.Sprintf("cut:%d:%s", g.n, op), Tool: "charge", Args: []byte(fmt.Sprintf(`{"n":%d}`, g.n))}
	result := []byte(fmt.Sprintf(`{"charge":"ch_%d"}`, g.n))
	want := fence.Counters{} // what the ledger must have counted, once each

	var tk *fence.Ticket
	if op == "commit-stale" || op == "commit-moved" {
		// The call read a domain that another process moves while it runs (commit-stale:
		// before its commit, which records the intent failed and answers stale_read_set,
		// the effect having run) or while its commit is in doubt (commit-moved: a commit
		// that landed first stays done, and its retry is answered with its cert).
		r.ReadSet = []fence.ReadSetEntry{{Domain: fmt.Sprintf("cutd:%d", g.n), Seq: 0}}
	}
	if op == "commit-moved" && k > 0 {
		g.moveDuring = r.ReadSet[0].Domain
		defer func() { g.moveDuring = "" }()
	}
	claim := op == "claim" || op == "claim-tx"
	if !claim {
		adm, err := e.Prepare(ctx, r)
		if err != nil || !adm.Fresh() {
			g.failf(name, "the claim before the cut: %+v %v", adm, err)
		}
		tk = adm.Ticket
		want.Admitted++
	}
	if op == "commit-stale" {
		g.move(name, r.Intent+":mover", r.ReadSet[0].Domain)
		want.Admitted++
	}
	g.st.noSpeculation.Store(op == "commit-tx")
	g.st.noFreshSpeculation.Store(op == "claim-tx")
	defer func() { g.st.noSpeculation.Store(false); g.st.noFreshSpeculation.Store(false) }()
	start, lostBefore := g.p.RoundTrips(), g.p.Lost()
	if k > 0 {
		g.p.LoseAnswer(k, down)
	}
	var (
		cert   *fence.Cert
		opErr  error
		landed bool // the call's outcome is recorded (checked below against the ledger)
	)
	switch op {
	case "claim", "claim-tx":
		adm, err := e.Prepare(ctx, r)
		opErr = err
		if err == nil {
			if !adm.Fresh() {
				g.failf(name, "a first attempt answered %+v", adm)
			}
			tk = adm.Ticket
			want.Admitted++
		}
	case "commit-stale":
		g.duringDoubt(name, lostBefore, r, &want, func() {
			_, opErr = settle(e, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *tk, Result: result})
		})
	case "commit", "commit-tx", "commit-moved":
		g.duringDoubt(name, lostBefore, r, &want, func() {
			cert, opErr = settle(e, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *tk, Result: result})
		})
		landed = opErr == nil
		if op == "commit-moved" && errors.Is(opErr, fence.ErrStaleReadSet) {
			// The domain moved before the commit landed (the lost round trip was not the
			// one that commits): the commit must say so, and the record must be failed.
			if st, err := e.Status(ctx, r.Intent); err != nil || st.State != fence.StateFailed || g.events(r.Intent)[fence.EventStale] != 1 {
				g.failf(name, "the commit answered %v; the record %+v %v", opErr, st, err)
			}
			op = "commit-stale"
		}
	case "release", "abort", "lost":
		during := g.duringDoubt
		if op == "release" {
			during = nil // the intent may be free already, and a duplicate admitted rightly
		}
		run := func() {
			_, opErr = settle(e, fence.Outcome{Kind: fence.OutcomeKind(op), Ticket: *tk, Reason: "cut " + op})
		}
		if during != nil {
			during(name, lostBefore, r, &want, run)
		} else {
			run()
		}
		landed = opErr == nil
	case "heartbeat":
		var next fence.Ticket
		opErr = retryUncoded(func() error {
			var err error
			next, err = e.Heartbeat(ctx, *tk)
			return err
		})
		if opErr == nil {
			if next.Token != tk.Token || next.Nonce != tk.Nonce || !next.LeaseUntil.After(tk.LeaseUntil) {
				g.failf(name, "heartbeat answered ticket %+v for %+v", next, *tk)
			}
			tk = &next
		}
	}
	trips := g.p.RoundTrips() - start
	// Disarmed before anything else: armed, a round trip of the engine's or the store's own
	// after the call (a background release, a doubt's settling) could lose its answer and cut
	// the connection for down while Status below reads (CI at deaafc0: "claim k=2 down=250ms:
	// the call took only 1 round trips", then the status read found no connection).
	g.p.LoseAnswer(0, 0)
	if k > 0 && g.p.Lost() == lostBefore {
		if int64(k) <= trips {
			g.failf(name, "no answer was lost: the call took %d round trips", trips)
		}
		// The call took fewer round trips than when it was counted (a one-statement commit
		// that missed, under load, is a transaction after it): nothing to lose.
		g.t.Logf("%s: the call took only %d round trips; nothing was lost", name, trips)
	}
	if k > 0 && down > 0 {
		time.Sleep(down) // the database is back
	}

	// What the holder's caller was told must be what the ledger holds.
	st, err := e.Status(ctx, r.Intent)
	if err != nil {
		g.failf(name, "status: %v", err)
	}
	switch op {
	case "claim", "claim-tx":
		if opErr != nil {
			// Not admitted: nothing runs. If the claim landed all the same, the intent is in
			// flight under a claim nobody holds, and a retry is refused, never admitted again.
			if fence.CodeOf(opErr) != fence.CodeStore {
				g.failf(name, "prepare failed with code %q (%v), want store_error", fence.CodeOf(opErr), opErr)
			}
			adm, err := e.Prepare(ctx, r)
			switch {
			case st.State == fence.StateInFlight:
				switch {
				case errors.Is(err, fence.ErrInFlight):
					want.InFlight++
				case err == nil && adm.Fresh() && g.events(r.Intent)[fence.EventRelease] == 1:
					// Released meanwhile by its own process, once the ledger answered.
					want.Admitted++
					tk = adm.Ticket
				default:
					g.failf(name, "retry of a claim that landed unanswered: %+v %v, want intent_in_flight", adm, err)
				}
			case st.State == fence.StateNone:
				if err != nil || !adm.Fresh() {
					g.failf(name, "retry of a claim that did not land: %+v %v, want admitted", adm, err)
				}
				want.Admitted++
				tk = adm.Ticket
			default:
				g.failf(name, "after a failed claim: state %s", st.State)
			}
		} else if st.State != fence.StateInFlight || st.Token != tk.Token {
			g.failf(name, "admitted, but the ledger holds %s token %d (ticket %d)", st.State, st.Token, tk.Token)
		}
		if tk != nil { // the admitted caller runs the effect and commits
			if cert, err = settle(e, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *tk, Result: result}); err != nil {
				g.failf(name, "commit after the claim: %v", err)
			}
			landed = true
		}
	case "commit", "commit-tx", "commit-moved":
		if !landed {
			g.failf(name, "the commit of an effect that ran was not recorded: %v", opErr)
		}
	case "commit-stale":
		var stale fence.StaleReadSetError
		if !errors.As(opErr, &stale) || !stale.Executed || stale.Domain != r.ReadSet[0].Domain || stale.Expected != 0 || stale.Actual != 1 {
			g.failf(name, "the commit of an effect that ran on a moved domain answered %v, want stale_read_set (executed, %s moved from 0 to 1)", opErr, r.ReadSet[0].Domain)
		}
	case "heartbeat":
		if opErr != nil {
			g.failf(name, "heartbeat by the holder: %v", opErr)
		}
		if st.State != fence.StateInFlight || st.Token != tk.Token || !st.LeaseUntil.Equal(tk.LeaseUntil) {
			g.failf(name, "after the heartbeat: %s token %d lease %s; the holder's ticket %d lease %s", st.State, st.Token, st.LeaseUntil, tk.Token, tk.LeaseUntil)
		}
		if cert, err = settle(e, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *tk, Result: result}); err != nil {
			g.failf(name, "commit after the heartbeat: %v", err)
		}
		landed = true
	default:
		if !landed {
			g.failf(name, "%s by the holder: %v", op, opErr)
		}
	}
	st, err = e.Status(ctx, r.Intent)
	if err != nil {
		g.failf(name, "status: %v", err)
	}
	ev := g.events(r.Intent)
	if ev[fence.EventLateResult] != 0 {
		g.failf(name, "the audit trail has %d late results: %v", ev[fence.EventLateResult], ev)
	}
	switch {
	case claim && tk == nil:
		// The claim that landed unanswered is released by its own process (fence's
		// orphan.go) once the ledger answers and the store settled its doubt, which a write
		// of the process does: the counters' flush below, if nothing did before. The
		// release carries the counters the process had then (the retry's refusal).
		if st.State != fence.StateInFlight && (st.State != fence.StateNone || ev[fence.EventRelease] != 1) {
			g.failf(name, "after a claim that landed unanswered: %s, events %v", st.State, ev)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if err := e.Flush(ctx); err != nil {
				g.failf(name, "flushing the counters: %v", err)
			}
			if st, err = e.Status(ctx, r.Intent); err != nil {
				g.failf(name, "status: %v", err)
			}
			if st.State == fence.StateNone {
				break
			}
			if time.Now().After(deadline) {
				g.failf(name, "a claim that landed unanswered is still %s 10 s after the ledger came back", st.State)
			}
		}
		if ev := g.events(r.Intent); ev[fence.EventRelease] != 1 {
			g.failf(name, "a claim that landed unanswered was released with events %v", ev)
		}
	case op == "release":
		// Free again: the next attempt is admitted (the effect did not run).
		if st.State != fence.StateNone || ev[fence.EventRelease] != 1 {
			g.failf(name, "after release: %s, events %v", st.State, ev)
		}
	case op == "abort" || op == "lost" || op == "commit-stale":
		wantState := map[string]fence.State{"abort": fence.StateFailed, "lost": fence.StateUnknown, "commit-stale": fence.StateFailed}[op]
		kind := map[string]string{"abort": fence.EventAbort, "lost": fence.EventLost, "commit-stale": fence.EventStale}[op]
		if st.State != wantState || st.Token != tk.Token || ev[kind] != 1 {
			g.failf(name, "after %s: %s token %d, events %v", op, st.State, st.Token, ev)
		}
		_, err := e.Prepare(ctx, r)
		if !errors.Is(err, fence.ErrPriorFailure) {
			g.failf(name, "duplicate after %s: %v, want prior_failure", op, err)
		}
		want.PriorFailure++
	default:
		// Done once, with this result; a duplicate is replayed.
		if st.State != fence.StateDone || st.Token != tk.Token || st.Cert == nil || st.Cert.Hash != cert.Hash || string(st.Cert.Result) != string(result) {
			g.failf(name, "after the commit: %+v; want done with cert %s", st, cert.Hash)
		}
		adm, err := e.Prepare(ctx, r)
		if err != nil || adm.Fresh() || adm.Cert.Hash != cert.Hash {
			g.failf(name, "duplicate after the commit: %+v %v; want the replay", adm, err)
		}
		want.Replayed++
	}
	if files, _ := fence.SpoolFiles(g.spool); len(files) != 0 {
		g.failf(name, "outcomes left in the spool: %v", files)
	}
	if err := g.settleDoubts(ctx, e); err != nil {
		g.failf(name, "%v", err)
	}
	after := g.counters()
	got := fence.Counters{
		Admitted: after.Admitted - before.Admitted, Replayed: after.Replayed - before.Replayed,
		InFlight: after.InFlight - before.InFlight, PriorFailure: after.PriorFailure - before.PriorFailure,
		LeaseLost: after.LeaseLost - before.LeaseLost, Reclaimed: after.Reclaimed - before.Reclaimed,
		Stale: after.Stale - before.Stale,
	}
	if got != want {
		g.failf(name, "the ledger counted %+v, want %+v (the call ended with %v)", got, want, opErr)
	}
	if k > 0 {
		g.t.Logf("%s: %d round trips; the call ended with %v", name, trips, opErr)
	}
	return trips
}

// TestLostAnswerAtEveryRoundTrip loses the answer of each round trip in turn of each call a
// holder makes, with the database back at once and away for a while, through the real
// engine, and checks after each that the ledger holds the call's outcome once, counts each
// attempt once, and that the caller was told the truth.
func TestLostAnswerAtEveryRoundTrip(t *testing.T) {
	t.Parallel()
	g := newCutRig(t)
	for _, op := range cutOps {
		n := g.cutCase(op, 0, 0)
		if n > 4 {
			// The count is of every round trip through the proxy: one the pool makes meanwhile
			// (a connection made again after an earlier case's cut, a ping) falls in it. Seen
			// once in CI under load ("commit took 6"); measured again, on a new intent.
			t.Logf("%s took %d round trips; measured again", op, n)
			n = g.cutCase(op, 0, 0)
		}
		if n < 1 || n > 4 {
			t.Fatalf("%s took %d round trips", op, n)
		}
		for k := 1; k <= int(n); k++ {
			for _, down := range []time.Duration{0, 250 * time.Millisecond} {
				g.cutCase(op, k, down)
			}
		}
	}
}

// settleDoubts flushes e's counters and writes until the store holds no doubt. The store
// settles the counters of a lost commit at the start of a later write, once the database can
// tell whether it landed: a write that finds another settling (the engine's background
// release) or a doubt undecided goes on without them, so it writes until none is left
// (TestLostAnswerSpooled read the counters after one flush, and in CI at 3a893ce counted no
// admission).
func (g *cutRig) settleDoubts(ctx context.Context, e *fence.Engine) error {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := e.Flush(ctx); err != nil {
			return fmt.Errorf("flushing the counters: %w", err)
		}
		if err := g.st.Update(ctx, func(fence.Tx) error { return nil }); err != nil {
			return fmt.Errorf("a write to settle the store's doubts: %w", err)
		}
		if g.st.doubts.n.Load() == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the store holds %d doubts 10 s after the database came back", g.st.doubts.n.Load())
		}
	}
}

// TestLostAnswerSpooled: the answer of a holder's report is lost (the server ran it) and the
// database stays away longer than the holder waits: Settle keeps the report in the spool.
// The next drain records it once: the retry recognises the report that landed, and the
// spool is emptied, with no late result, no lease lost and each admission counted once.
func TestLostAnswerSpooled(t *testing.T) {
	g := newCutRig(t)
	ctx := context.Background()
	for _, kind := range []fence.OutcomeKind{fence.OutcomeCommit, fence.OutcomeAbort} {
		e := fence.New(g.st, fence.Config{LeaseTTL: time.Minute, SpoolDir: g.spool})
		before := g.counters()
		r := fence.Request{Intent: "spooled:" + string(kind), Tool: "charge", Args: []byte(`{"usd":2}`)}
		adm, err := e.Prepare(ctx, r)
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		// The report's last round trip: its commit (one statement, or abort's transaction).
		k := 1
		if kind == fence.OutcomeAbort {
			k = 2
		}
		g.p.LoseAnswer(k, 1500*time.Millisecond)
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err = e.Settle(short, fence.Outcome{Kind: kind, Ticket: *adm.Ticket, Result: []byte(`"ok"`), Reason: "spooled"})
		cancel()
		var sp fence.SpooledError
		if !errors.As(err, &sp) || g.p.Lost() == 0 {
			t.Fatalf("%s: settle while the database is away: %v (%d answers lost); want it spooled", kind, err, g.p.Lost())
		}
		time.Sleep(1500 * time.Millisecond) // the database is back
		if n, err := e.DrainSpool(ctx); err != nil || n != 1 {
			t.Fatalf("%s: drain: %d %v", kind, n, err)
		}
		if files, _ := fence.SpoolFiles(g.spool); len(files) != 0 {
			t.Fatalf("%s: spool not emptied: %v", kind, files)
		}
		st, err := e.Status(ctx, r.Intent)
		wantState := map[fence.OutcomeKind]fence.State{fence.OutcomeCommit: fence.StateDone, fence.OutcomeAbort: fence.StateFailed}[kind]
		ev := g.events(r.Intent)
		if err != nil || st.State != wantState || st.Token != adm.Ticket.Token || ev[fence.EventLateResult] != 0 {
			t.Fatalf("%s: after the drain: %+v %v, events %v", kind, st, err, ev)
		}
		if err := g.settleDoubts(ctx, e); err != nil {
			t.Fatal(err)
		}
		if c := g.counters(); c.Admitted-before.Admitted != 1 || c.LeaseLost != before.LeaseLost {
			t.Fatalf("%s: counted %+v, before %+v: want one admission, no lease lost", kind, c, before)
		}
	}
}
