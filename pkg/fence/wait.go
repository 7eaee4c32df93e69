package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Notifier is implemented by stores that can tell waiters when an intent's record changes in
// another process (PostgreSQL LISTEN/NOTIFY). Watch returns a channel that is closed on the
// next change of intent (or when the store can no longer tell, so the waiter asks again) and a
// function that stops watching.
type Notifier interface {
	Watch(ctx context.Context, intent string) (<-chan struct{}, func(), error)
}

// notifiedPoll is how often a wait that a Notifier will wake still reads the store, as a
// safety net.
const notifiedPoll = time.Second

// PrepareWait is Prepare that coalesces: when the intent is in flight it waits, up to maxWait,
// for the holder to finish, and then returns the holder's cert (counted as coalesced), or a
// Ticket if the holder released the intent, or the holder's failure. Only if the holder is
// still running when maxWait ends, or when ctx ends during the wait, does it return
// InFlightError: a wait cut short by ctx answers with the InFlightError it waited on, not with
// ctx's error (which an attempt whose ctx ended before it asked the ledger gets). When the holder's lease lapses
// the wait ends with the intent's unknown (PriorFailureError, Healable when the holder's own
// late result may still heal it): a wait never outlives the lease it waits on. Waiting notices outcomes of
// this process at once, and those of other processes through the store's Notifier if it has
// one, else by polling the store (2 ms growing to 100 ms).
func (e *Engine) PrepareWait(ctx context.Context, req Request, maxWait time.Duration) (Admission, error) {
	return e.PrepareWaitUntil(ctx, req, maxWait, nil)
}

// PrepareWaitUntil is PrepareWait whose waiting also ends when giveUp is closed (a nil giveUp
// never closes). Only the waiting: every reading and writing of the ledger runs in ctx alone,
// so closing giveUp never cuts one short, and an attempt that claims the intent is admitted
// whenever giveUp is closed. An attempt that finds the intent in flight once giveUp is closed
// ends there, before it asks the ledger again, with the InFlightError it waited on, counted
// as refused in flight like a wait whose maxWait ran out: it ended with the intent in flight
// and did not run. wrap gives up the wait of a duplicate its agent cancelled this way.
func (e *Engine) PrepareWaitUntil(ctx context.Context, req Request, maxWait time.Duration, giveUp <-chan struct{}) (Admission, error) {
	adm, d, err := e.PrepareWaitUncounted(ctx, req, maxWait, giveUp)
	e.Count(d)
	return adm, err
}

// Decision is the bucket of Counters one answer of the fence goes in, not counted yet
// (PrepareWaitUncounted). The zero Decision, and that of an answer that is no attempt the
// fence decided (a store error, an invalid request), counts nothing.
type Decision struct {
	b  bucket
	ok bool
}

// Count puts d in its bucket.
func (e *Engine) Count(d Decision) {
	if d.ok {
		e.counts.add(d.b)
	}
}

// PrepareWaitUncounted is PrepareWaitUntil that leaves its answer out of the counters and
// returns the Decision that Count puts there. It is for a caller that may ask the ledger
// again for the same call, which then counts only the last answer, so that each call lands in
// exactly one bucket: a refusal that DrainedFor says to ask again about (its outcome was
// recorded meanwhile), wrap's continuation of a multi round-trip call (SEP-2322) that waited
// for a first round answered with a question, or wrap's call refused as unknown that the person
// then settled through elicitation. Counting every answer counted such a call twice, a refusal
// beside the answer it got. A Decision never counted is an attempt missing from the counters.
func (e *Engine) PrepareWaitUncounted(ctx context.Context, req Request, maxWait time.Duration, giveUp <-chan struct{}) (Admission, Decision, error) {
	return e.prepareWait(ctx, req, maxWait, giveUp, nil, nil)
}

// Waited is what one call's waiting learned that its next ask of the ledger must know: the
// first claim it found holding the intent. A call that asks again after a refusal (a refusal
// DrainedFor says to ask again about, wrap's call refused as unknown that the person then
// settled through elicitation) is the same call, still a waiter of that claim: a failure of
// any claim of the intent from that one on (sharedFailure) is its failure too. Its first ask
// may have waited on a claim whose lease lapsed (the refusal, unknown), whose holder's late
// failure then healed it; asked again without knowing it had waited, the call found the
// intent free and ran a second time, where SPEC §6 gives it that failure
// (contract FailureSharedWithAWaiterThatAsksAgain). The zero Waited is a call that has not
// waited yet. A Waited belongs to one call; it is not safe for concurrent use.
type Waited struct {
	since uint64
	// poll, when set (PollEvery), is how often the call's waits read the store.
	poll time.Duration
}

// Since returns the token of the first claim the call found holding the intent (0: none).
func (w *Waited) Since() uint64 { return w.since }

// PollEvery makes the call's later waits read the store every d (d > 0), not 2 ms growing to
// 100 ms: for a caller that waits on one attempt for long, ask after ask (wrap's task that
// follows an attempt in flight, for as long as the attempt runs), where the polling of a
// short wait, kept up, read the store about 10 times a second per waiter (1,024 such waiters
// made about 14,000 SQLite transactions a second: TestFollowerLedgerCost). An outcome this
// process records, and one a Notifier announces, still wakes the wait at once.
func (w *Waited) PollEvery(d time.Duration) {
	if d > 0 {
		w.poll = d
	}
}

// PrepareWaitWith is PrepareWaitUncounted for a call that may ask the ledger again: w carries
// what its waiting learned from one ask to the next (pass the same w to each ask of the call;
// nil is a call that asks once).
func (e *Engine) PrepareWaitWith(ctx context.Context, req Request, maxWait time.Duration, giveUp <-chan struct{}, w *Waited) (Admission, Decision, error) {
	return e.prepareWait(ctx, req, maxWait, giveUp, nil, w)
}

// prepareWait is PrepareWaitWith whose claims, with note, are noted there (beside.go).
func (e *Engine) prepareWait(ctx context.Context, req Request, maxWait time.Duration, giveUp <-chan struct{}, note *claimNote, w *Waited) (Admission, Decision, error) {
	c := call{note: note}
	if err := e.validate(&req, &c); err != nil {
		return Admission{}, Decision{}, err
	}
	deadline := time.Now().Add(maxWait)
	poll, ceiling := 2*time.Millisecond, 100*time.Millisecond
	if w != nil && w.poll > 0 {
		poll, ceiling = w.poll, w.poll
	}
	waited := false
	var (
		out outcome
		adm Admission
		err error
	)
	notifier, _ := e.store.(Notifier)
	// since is the first claim found holding the intent (InFlightError.Token), by this ask or
	// an earlier ask of the same call (w): every claim of the intent from it on ran while this
	// call waited (sharedFailure).
	var since uint64
	if w != nil {
		since = w.since
		defer func() { w.since = since }()
	}
	var remote <-chan struct{}
	stopRemote := func() {}
	defer func() { stopRemote() }()
	for {
		ch, stop := e.watch.add(req.Intent)
		lastOut, lastErr := out, err
		out, adm, err = e.prepare(ctx, &req, &c)
		if waited && err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			out, err = lastOut, lastErr // ctx ended as the ledger was asked again
		}
		if !worthWaiting(err) || !time.Now().Before(deadline) {
			stop()
			if err != nil {
				return Admission{}, decide(out, err, waited), err
			}
			if adm.Fresh() && since != 0 {
				if ferr := e.sharedFailure(ctx, adm, since); ferr != nil {
					return Admission{}, decide(out, ferr, waited), ferr
				}
			}
			return adm, decide(out, err, waited), nil
		}
		if since == 0 { // only the first claim found matters: no errors.As at every poll
			var fe InFlightError
			if errors.As(err, &fe) {
				since = fe.Token
			}
		}
		waited = true
		if closed(giveUp) {
			stop()
			return Admission{}, decide(out, err, waited), err
		}
		if notifier != nil && remote == nil {
			if rch, rstop, werr := notifier.Watch(ctx, req.Intent); werr == nil {
				// With a notification on the way, polling is only a safety net.
				remote, stopRemote = rch, rstop
				poll, ceiling = max(poll, notifiedPoll), max(ceiling, notifiedPoll)
				stop()
				continue // ask again now that a change cannot slip between the look and the watch
			}
		}
		wait := min(poll, time.Until(deadline))
		timer := time.NewTimer(wait)
		select {
		case <-ch:
		case <-remote:
			stopRemote()
			remote, stopRemote = nil, func() {}
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			stop()
			return Admission{}, decide(out, err, waited), err
		case <-giveUp:
		}
		timer.Stop()
		stop()
		// Given up, also when the intent changed as it was: not asked again. So with ctx ended
		// as another case woke the wait (select picks among ready cases at random): asked
		// again, the ledger would answer ctx's error, not the InFlightError waited on.
		if closed(giveUp) || ctx.Err() != nil {
			return Admission{}, decide(out, err, waited), err
		}
		poll = min(poll*2, ceiling)
	}
}

// sharedFailure is the failure of an attempt that ran while a waiter waited, when its holder
// reported OutcomeFailure, for the waiter that then claimed the intent (adm): SPEC §6 gives
// every waiter that same failure, not a run of its own. A waiter in the holder's process is
// given it there (wrap's flights); one in another process (a second wrap, a gateway replica
// on the same ledger) learns it only from the ledger, where the release leaves no record, so
// the intent's audit trail is read for a failure event of a claim from since on: since is the
// first claim the waiter found holding the intent, and a claim's token grows with each claim
// of the intent, so those are the claims that held it while the waiter waited, whether or not
// one of its looks found them. Before 2026-12-06 that waiter found the intent free and ran the
// call again in its own server (TestFailureIsSharedWithAWaiterInAnotherWrap); and until the
// claims were told by token, only those a look had found counted: a claim released as not
// run, then another attempt claiming, running and failing between two looks, and the waiter
// ran the call again (contract FailureSharedWithAWaiterThatNeverSawTheFailedClaim).
//
// Found, the waiter's claim is given up, and FailedWaitError returned: nothing runs. The
// claim ran nothing, so its end is a release, not a failure: a call that finds it holding the
// intent came after the failure was recorded, a retry, and runs once it is given up (a
// waiter that was there before finds the failure itself, its claim being older). Before, it
// ended as a failure of its own, and such a retry was told that the call it waited for had
// failed (contract RetryAfterASharedFailureRuns). Not readable, the claim is given up as
// not run and the ledger's error returned: the call does not run either (every error means
// do not run), for the attempt it waited for may have failed; before, the claim stood and the
// call ran (contract WaiterThatCannotReadTheAuditTrailDoesNotRun). If the ledger does not
// take the claim's end, the claim is left to the engine as a lost one (released once the
// ledger answers). Not found, nil: the claim stands and the call runs.
func (e *Engine) sharedFailure(ctx context.Context, adm Admission, since uint64) error {
	t := *adm.Ticket
	var failed *Event
	err := e.store.View(ctx, func(tx Tx) error {
		return tx.Events(t.Intent, func(ev Event) bool {
			if ev.Kind == EventFailure && ev.Token >= since && ev.Token != t.Token {
				failed = &ev
			}
			return true
		})
	})
	if err == nil && failed == nil {
		return nil
	}
	reason := "not run: whether an attempt it waited for failed could not be read from the ledger"
	var why error = fmt.Errorf("fence: intent %q was claimed after waiting for another attempt, but whether that attempt failed could not be read from the ledger (%w); this call was NOT executed and its claim is given up, so a retry may run it", t.Intent, err)
	if err == nil {
		reason = fmt.Sprintf("not run: coalesced onto the failure of claim %d, which it waited for: %s", failed.Token, failed.Reason)
		why = FailedWaitError{Intent: t.Intent, Token: failed.Token, Reason: failed.Reason}
	}
	if err := e.end(ctx, t, EventRelease, reason, false); err != nil {
		e.lostClaim(t.Intent, t.Nonce)
	}
	return why
}

// closed reports whether ch is closed (a nil ch never is).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// worthWaiting reports whether a refusal may turn into an answer while the claim's lease runs:
// only an intent in flight. A wait never outlives the lease it waits on: once the lease has
// lapsed the intent is unknown, and even when its holder's late result may still heal it
// (PriorFailureError.Healable) the waiter is answered at once, so a stalled holder cannot keep
// a crowd of waiters (and the workers they occupy) for their whole wait. A retry after the
// heal receives the recorded result.
func worthWaiting(err error) bool {
	return errors.Is(err, ErrInFlight)
}

// watchers wakes waiters of an intent when this process records its outcome.
type watchers struct {
	mu sync.Mutex
	m  map[string]*watch
}

type watch struct {
	ch chan struct{}
	n  int
}

func (w *watchers) add(intent string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*watch{}
	}
	x := w.m[intent]
	if x == nil {
		x = &watch{ch: make(chan struct{})}
		w.m[intent] = x
	}
	x.n++
	return x.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		x.n--
		if x.n == 0 && w.m[intent] == x {
			delete(w.m, intent)
		}
	}
}

func (w *watchers) wake(intent string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := w.m[intent]; x != nil {
		close(x.ch)
		delete(w.m, intent)
	}
}
