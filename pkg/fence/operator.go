package fence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// ErrNotFound is returned by Clear for an intent the ledger does not hold.
var ErrNotFound = errors.New("fence: no such intent in the ledger")

// Status returns the ledger's record of an intent, or a record with State StateNone when there
// is none. It never creates state. The record is a copy the caller may keep.
func (e *Engine) Status(ctx context.Context, intent string) (Record, error) {
	rec, _, err := e.StatusAt(ctx, intent)
	return rec, err
}

// StatusAt is Status, with the ledger's clock when the record was read (Tx.Now: on PostgreSQL
// the database's, which the record's lease was set by and which clear and resolve judge it
// by): judge the lease against it (LeaseHolds, SilentHolder), not against this host's clock.
func (e *Engine) StatusAt(ctx context.Context, intent string) (Record, time.Time, error) {
	var (
		out Record
		now time.Time
	)
	err := e.store.View(ctx, func(tx Tx) error {
		rec, err := tx.Get(intent)
		if err != nil {
			return err
		}
		now = tx.Now()
		if rec == nil || (rec.State == StateDone && !rec.ExpiresAt.IsZero() && !now.Before(rec.ExpiresAt)) {
			out = Record{Intent: intent, State: StateNone}
			return nil
		}
		out = rec.deepCopy()
		return nil
	})
	return out, now, err
}

// deepCopy returns a copy of r that shares nothing a caller could change in place with the
// record a store keeps (the memory store keeps the record itself, SQLite a decoded copy for
// later reads).
func (r *Record) deepCopy() Record {
	out := *r
	out.Args = bytes.Clone(r.Args)
	out.ExactArgs = bytes.Clone(r.ExactArgs)
	out.ReadSet = slices.Clone(r.ReadSet)
	out.Clock = maps.Clone(r.Clock)
	out.Redacted = slices.Clone(r.Redacted)
	if r.Cert != nil {
		c := *r.Cert
		c.Args = bytes.Clone(c.Args)
		c.Result = bytes.Clone(c.Result)
		c.ReadSet = slices.Clone(c.ReadSet)
		c.Clock = maps.Clone(c.Clock)
		out.Cert = &c
	}
	return out
}

// Current returns a domain's current sequence number (the floor for a domain never used),
// the value a caller puts in its read set. It never creates state.
func (e *Engine) Current(ctx context.Context, domain string) (uint64, error) {
	var seq uint64
	err := e.store.View(ctx, func(tx Tx) error {
		var err error
		seq, _, err = tx.DomainSeq(domain)
		return err
	})
	return seq, err
}

// Clear is the operator's reconciliation: it drops the intent's record whatever its state, and
// records who did it and why. After a clear the next attempt runs. A holder still running finds
// its ticket lost (LeaseLostError) and cannot overwrite anything, but the effect it is running
// is not stopped: see ClearUnlessHeld.
func (e *Engine) Clear(ctx context.Context, intent, who, reason string) (Record, error) {
	return e.clear(ctx, intent, 0, who, reason, false)
}

// ClearClaim is Clear (force) or ClearUnlessHeld of the claim whose fencing token is token
// (Record.Token of the record the operator was shown; 0: whatever claim holds the intent): an
// intent cleared or resolved and claimed again since is refused (NotFencedError with Reclaimed
// set) and nothing changes, so a clear written about one attempt never frees another, whose
// effect nobody has checked.
func (e *Engine) ClearClaim(ctx context.Context, intent string, token uint64, who, reason string, force bool) (Record, error) {
	return e.clear(ctx, intent, token, who, reason, !force)
}

// ClearUnlessHeld is Clear, except that it refuses (NotFencedError, nothing changed) a claim
// its holder may still be running: in flight with its lease running and its holder not known
// to be gone, or one whose lease lapsed (in flight, or unknown for that alone) while its holder
// process still runs on this host (SilentHolder). Clearing such a claim would let the next
// attempt run the effect while the holder may still run or finish it. A claim whose holder is
// gone, or out of sight with its lease lapsed, is cleared, as is every other state. The check
// and the clear are one transaction.
func (e *Engine) ClearUnlessHeld(ctx context.Context, intent, who, reason string) (Record, error) {
	return e.clear(ctx, intent, 0, who, reason, true)
}

// SilentHolder reports whether rec is a claim whose holder may still run or finish its effect
// although its lease lapsed by now: in flight, or unknown only because its lease lapsed or its
// holder looked gone (the claim can still heal), and its holder process still runs on this host (the
// process's identity, start time included, is alive: stopped by SIGSTOP or a debugger, stalled
// in a system call, or a serve process whose agent runs the call). A stall beats a double: such
// a claim is not freed for the next attempt (ClearUnlessHeld, Resolve as did-not-happen) until
// that process is gone or its late result settles the claim. why says so, for an operator.
func (e *Engine) SilentHolder(now time.Time, rec Record) (why string, silent bool) {
	switch {
	case rec.State == StateInFlight && now.Before(rec.LeaseUntil): // held, not silent
		return "", false
	case rec.State == StateInFlight || rec.State == StateUnknown:
		// A process group the holder started to run the call, running on without the holder or
		// without its own leader, may finish the effect whatever the claim's nonce says: an
		// unknown claim whose server died mid-call can no longer heal, but its call may still
		// be running in what the server started.
		if _, runs := CarrierRuns(rec.Owner); runs {
			return fmt.Sprintf("claim %d (lease until %s) is held by %s: it may still run or finish the effect, and the next attempt would run it again; stop that group, or wait until it has ended",
				rec.Token, rec.LeaseUntil.UTC().Format(time.RFC3339), holderWords(rec.Owner)), true
		}
	}
	switch {
	case rec.State != StateInFlight && !rec.Healable():
		return "", false
	case !e.mine(rec.Owner) && e.cfg.Liveness(rec.Owner) != Alive:
		return "", false
	}
	return fmt.Sprintf("the lease of claim %d lapsed at %s, but its holder, process %s, still runs on this host (stopped, stalled, or a serve process whose agent runs the call): if it resumes, it may still run or finish the effect, and the next attempt would run it again; stop that process (the fence then sees it gone) or let its late result settle the intent",
		rec.Token, rec.LeaseUntil.UTC().Format(time.RFC3339), HolderHere(rec.Owner)), true
}

// HolderHere is owner, followed, for a holder running in a PID namespace below this process's
// (a container on this host), by the pid this process's /proc shows it under: the pid in the
// owner string is counted in the container and names another process here.
func HolderHere(owner string) string {
	if pid, ok := PIDHere(owner); ok {
		return fmt.Sprintf("%s (pid %d here: it runs in a PID namespace of its own)", owner, pid)
	}
	return owner
}

// LeaseHolds is leaseRuns for the front ends: whether rec is a claim an operator cannot free
// yet because its lease runs (ClearUnlessHeld and a resolve as did-not-happen refuse it), and
// why, for an operator or a person.
func LeaseHolds(now time.Time, rec Record) (why string, holds bool) { return leaseRuns(now, rec) }

// leaseRuns reports whether rec is a claim whose lease still runs: in flight, or unknown only
// because its holder process looked gone (it can still heal). The process that made a claim is
// not all that may run its effect: a serve claim's effect is run by the agent holding its
// ticket, which can go on (and commit through a new serve process) when that serve process is
// gone, and a wrap's server may have started processes that outlive it. Until the lease
// lapses, the claim is not freed for the next attempt by an operator who did not force it
// (ClearUnlessHeld, Resolve as did-not-happen): before, a gone holder was enough, and the
// agent's effect, run after the clear, ran again with the next attempt.
func leaseRuns(now time.Time, rec Record) (why string, runs bool) {
	if (rec.State != StateInFlight && !rec.Healable()) || !now.Before(rec.LeaseUntil) {
		return "", false
	}
	return fmt.Sprintf("the lease of claim %d runs until %s: whoever holds its ticket (the agent of a serve claim, a process its holder started) may still run or finish the effect, even with its holder process %s gone; wait until the lease lapses, or look again then",
		rec.Token, rec.LeaseUntil.UTC().Format(time.RFC3339), rec.Owner), true
}

func (e *Engine) clear(ctx context.Context, intent string, token uint64, who, reason string, unlessHeld bool) (Record, error) {
	if reason == "" {
		return Record{}, InvalidError{"reason", "say why the intent is cleared (what you checked in the real system)"}
	}
	who, reason = ledgerText(who), ledgerText(reason)
	var prev Record
	err := e.update(ctx, func(tx Tx) error {
		rec, err := tx.Get(intent)
		if err != nil {
			return err
		}
		// A clear whose claim is gone may be the retry of one that landed, its answer lost:
		// the audit trail tells (SettledBeforeError).
		if rec == nil {
			return settledBefore(tx, intent, token, who, reason, fmt.Errorf("%w: %q", ErrNotFound, intent), EventClear, EventResolveDidNotHappen)
		}
		if token != 0 && rec.Token != token {
			// Another claim holds the intent: refused, even when the trail shows the named
			// claim cleared already (see SettledBeforeError).
			return otherClaim(intent, token, rec)
		}
		if unlessHeld && rec.State == StateInFlight {
			if v, _, _ := e.judge(tx.Now(), rec); v == held {
				return NotFencedError{Intent: intent, State: StateInFlight, Why: fmt.Sprintf("claim %d is held by process %s until %s, and its holder may still be running it; wait for its outcome", rec.Token, rec.Owner, rec.LeaseUntil.UTC().Format(time.RFC3339))}
			}
		}
		if why, silent := e.SilentHolder(tx.Now(), *rec); unlessHeld && silent {
			return NotFencedError{Intent: intent, State: rec.State, Why: why}
		}
		if why, runs := leaseRuns(tx.Now(), *rec); unlessHeld && runs {
			return NotFencedError{Intent: intent, State: rec.State, Why: why}
		}
		if unlessHeld && rec.State == StateDone && (rec.ExpiresAt.IsZero() || tx.Now().Before(rec.ExpiresAt)) {
			// An operator clears what they checked; an intent that went unknown and then
			// healed (its holder's late commit) or was resolved meanwhile is done: its effect
			// ran, and a clear would have the next attempt run it again.
			return NotFencedError{Intent: intent, State: StateDone, Why: "its effect ran and its result is recorded and replayed to duplicates (it may have been settled since you looked: see ledger show); clearing it would have the next attempt run the effect again"}
		}
		prev = *rec
		if err := tx.Delete(intent); err != nil {
			return err
		}
		return tx.AppendEvent(Event{At: tx.Now(), Intent: intent, Kind: EventClear, Who: who, Reason: reason, State: rec.State, Token: rec.Token})
	})
	if err == nil {
		e.watch.wake(intent)
	}
	return prev, err
}

// Sweep drops done outcomes older than the result TTL and, unless Config.KeepEvents, audit
// events older than the result TTL but those KeptForever. It returns how many records it
// dropped. Fenced intents (failed, unknown) are never swept: only Clear ends them. It drops
// them in batches, the oldest first, each batch a transaction of its own; a store whose Tx is
// an ExpiredSweeper drops a batch itself, without reading its records.
func (e *Engine) Sweep(ctx context.Context) (int, error) {
	const batch = 1000
	total := 0
	for {
		n, more := 0, false
		err := e.update(ctx, func(tx Tx) error {
			var err error
			if sw, ok := tx.(ExpiredSweeper); ok {
				n, more, err = sw.SweepExpired(tx.Now(), batch)
			} else {
				n, more, err = sweepExpired(tx, batch)
			}
			if err != nil {
				return err
			}
			if (!more || n == 0) && !e.cfg.KeepEvents {
				_, err = tx.DeleteEventsBefore(tx.Now().Add(-e.cfg.ResultTTL))
			}
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if !more || n == 0 {
			return total, nil
		}
	}
}

// SweepEvents drops the audit events older than age, except those KeptForever, whatever the
// engine's ResultTTL and KeepEvents; it returns how many it dropped.
func (e *Engine) SweepEvents(ctx context.Context, age time.Duration) (int, error) {
	n := 0
	err := e.update(ctx, func(tx Tx) error {
		var err error
		n, err = tx.DeleteEventsBefore(tx.Now().Add(-age))
		return err
	})
	return n, err
}

// sweepExpired is SweepExpired for a Tx that does not implement it: a scan of the batch's
// records, in expiry order, and a Delete of each.
func sweepExpired(tx Tx, limit int) (int, bool, error) {
	var doomed []string
	err := tx.Scan(Filter{States: []State{StateDone}, ExpiresBefore: tx.Now(), Limit: limit, ByExpiry: true}, func(r *Record) bool {
		doomed = append(doomed, r.Intent)
		return true
	})
	if err != nil {
		return 0, false, err
	}
	for _, id := range doomed {
		if err := tx.Delete(id); err != nil {
			return 0, false, err
		}
	}
	return len(doomed), len(doomed) == limit, nil
}

// Recover settles what the spool holds (see Settle) and then applies the lease rules (see
// docs/RELIABILITY.md) to every in-flight intent: a claim whose holder is gone, or whose lease
// lapsed, becomes unknown (fenced until cleared, healed by its holder's late result), except a
// re-run-safe one, which is freed for the next attempt. Every change writes an audit event. It
// returns how many claims it changed. An in-flight record that does not decode is skipped and
// returned among the errors as an *UnreadableError (OnlyUnreadable tells such an answer from a
// failure): the rest were still done. Run it when a process opens a ledger and now and then
// after: prepare applies the same rules lazily to each intent it meets, so Recover is what
// bounds how long an abandoned claim shows as in_flight.
func (e *Engine) Recover(ctx context.Context) (int, error) {
	_, serr := e.DrainSpool(ctx)
	n := 0
	var bad []error
	err := e.update(ctx, func(tx Tx) error {
		n, bad = 0, bad[:0]
		var claims []*Record
		// A claim whose record does not decode is left as it is (every attempt of its intent
		// fails on it, so it stays fenced) and reported: the other claims still get the rules.
		unreadable := func(u *UnreadableError) { bad = append(bad, u) }
		err := tx.Scan(Filter{States: []State{StateInFlight}, Unreadable: unreadable}, func(r *Record) bool {
			// A store may select by an index beside the record (SQLite's state column): a
			// record filed as in flight whose body says otherwise (damage, a hand edit) is
			// not a claim, and judged as one a done outcome was made unknown, or deleted when
			// re-run safe. `ledger check` names it.
			if r.State == StateInFlight {
				claims = append(claims, r)
			}
			return true
		})
		if err != nil {
			return err
		}
		now := tx.Now()
		for _, r := range claims {
			switch v, kind, why := e.judge(now, r); v {
			case fenceIt:
				if err := e.markUnknown(tx, r, kind, why); err != nil {
					return err
				}
				n++
			case takeIt:
				if err := tx.Delete(r.Intent); err != nil {
					return err
				}
				if err := tx.AppendEvent(Event{At: now, Intent: r.Intent, Kind: EventReclaim, Who: e.cfg.Owner, Reason: "freed for the next attempt: " + why, State: StateInFlight}); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	if err != nil {
		bad = nil
	}
	return n, errors.Join(append([]error{serr, err}, bad...)...)
}

// EvictDomain forgets a domain's row to bound memory. The store's floor rises to the domain's
// sequence number (it never falls), and every domain without a row reads as the floor, so no
// sequence number a cert carries can be handed out again for that domain.
//
// Evict only domains no decision is pending on. The evicted domain reads as the floor, which
// is above its last number when another domain was evicted higher: a read set that names it
// with that number is then stale. A new attempt is refused before it runs (re-read and decide
// again), but a claim already in flight whose read set names the domain fails at commit, and
// its intent is fenced until an operator clears it.
func (e *Engine) EvictDomain(ctx context.Context, domain string) error {
	return e.update(ctx, func(tx Tx) error {
		seq, found, err := tx.DomainSeq(domain)
		if err != nil || !found {
			return err
		}
		floor, err := tx.DomainFloor()
		if err != nil {
			return err
		}
		if seq > floor {
			if err := tx.SetDomainFloor(seq); err != nil {
				return err
			}
		}
		return tx.DeleteDomain(domain)
	})
}

// Stats returns this process's counters since start and the ledger's totals (including this
// process's counts not yet flushed).
//
// The ledger's totals never go down from one answer to the next: counts taken for a write
// are in neither the ledger that Stats reads nor the counts still pending until that write
// commits (and on PostgreSQL, a commit whose answer was lost keeps them out until the store
// has settled whether it landed), so what the ledger and the pending counts add up to falls
// below an earlier answer meanwhile. Where it does, Stats answers the earlier total: a lower
// bound of the truth still, since counts only grow. A gateway exports these totals as a
// Prometheus counter, which reads any decrease as a restart and counts the whole total
// again (before 2026-12-07 every scrape during a write of a busy gateway could:
// TestGatewayLedgerAttemptsNeverGoDown).
func (e *Engine) Stats(ctx context.Context) (Stats, error) {
	boot := e.counts.snapshot()
	var ledger Counters
	err := e.store.View(ctx, func(tx Tx) error {
		var err error
		ledger, err = tx.Counters()
		return err
	})
	if err != nil {
		return Stats{SinceBoot: boot, Ledger: ledger.Add(e.counts.unflushed())}, err
	}
	ledger = ledger.Add(e.counts.unflushed())
	for b := range nBuckets {
		v, high := ledger.field(b), &e.ledgerHigh[b]
		for {
			h := high.Load()
			if *v <= h {
				*v = h
				break
			}
			if high.CompareAndSwap(h, *v) {
				break
			}
		}
	}
	return Stats{SinceBoot: boot, Ledger: ledger}, nil
}

// Flush writes this process's unflushed counters to the ledger.
func (e *Engine) Flush(ctx context.Context) error {
	return e.updateCounted(ctx, func(Tx) error { return nil }, nil, true)
}

// Close flushes counters and closes the store. Done is closed as it begins.
func (e *Engine) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e.closeLostClaims(ctx)
	herr := e.closeHeld(ctx)
	ferr := e.Flush(ctx)
	cerr := e.store.Close()
	return errors.Join(herr, ferr, cerr)
}

// Done returns a channel that is closed once Close is called, before the store is closed:
// work its owner runs beside the engine stops there (pkg/store's background sweep and
// recovery of a ledger whose engine alone was closed, as a user who kept only led.Engine
// does).
func (e *Engine) Done() <-chan struct{} { return e.lost.stop }

// closeHeld tries once more to keep the outcomes held in memory (see Settle: neither the
// ledger nor the spool took them), in the ledger or the spool, and names those it could not:
// they end with this process. Before 2026-12-06 they ended with it without a word, though
// their Settle had been answered that every Recover would try again
// (TestCloseNamesTheOutcomesItsMemoryHeld).
func (e *Engine) closeHeld(ctx context.Context) error {
	if !e.spool.holdsAny() {
		return nil
	}
	_, _ = e.settleHeld(ctx) // what it puts in the spool, the next process opening the ledger records
	left := e.spool.heldOutcomes()
	if len(left) == 0 {
		return nil
	}
	what := make([]string, 0, len(left))
	for _, o := range left {
		what = append(what, fmt.Sprintf("the %s of intent %q (claim %d)", o.Kind, o.Ticket.Intent, o.Ticket.Token))
	}
	slices.Sort(what)
	return fmt.Errorf("fence: %d outcome(s) that neither the ledger nor the spool could take end with this process: %s; each claim stays in flight in the ledger and is judged as any whose holder is gone (unknown, fenced for an operator, unless declared safe to re-run)",
		len(left), strings.Join(what, "; "))
}

// Outlived says, of the claim rec in flight, what a process opening the ledger makes of it
// (Recover's rules) when the ledger's clock says now, judged by no engine (`ledger check`,
// which writes nothing): "" while the claim holds (its lease runs and its holder is not known
// gone); else why it does not, and whether the next open frees it (declared safe to re-run)
// rather than fencing it as unknown. A spool that holds its outcome, which keeps a re-run-safe
// claim fenced, is the opening engine's to see: freed claims are those it frees without one.
func Outlived(now time.Time, rec Record) (why string, freed bool) {
	e := &Engine{cfg: Config{Owner: "\x00", Liveness: OwnerLiveness}} // owns no claim
	switch v, _, why := e.judge(now, &rec); v {
	case fenceIt:
		return why, false
	case takeIt:
		return why, true
	}
	return "", false
}
