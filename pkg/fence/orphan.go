package fence

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Claims whose answer was lost.
//
// A claim is written in a store transaction whose answer can be lost: a shared store's
// connection dies after the claim was sent, and the server cannot be asked whether it was
// recorded before Prepare must answer (PostgreSQL's CommitUnknownError). Prepare then fails,
// so the caller never gets the ticket and never runs the call, yet the claim may be in the
// ledger, held by this process. Left there it stays in flight until its lease lapses, and
// then, since its holder is alive, unknown: fenced, every retry refused, and an operator's
// clear refused without --force while this process runs (TestServerCrashesAroundCalls saw
// one after a database crash). Nobody will ever report its outcome, for nobody has its
// ticket.
//
// So the engine keeps each claim whose Prepare failed after writing it, and releases it once
// the ledger answers: if the intent's record is that very claim (its nonce is new to every
// claim, and only this engine knew it), still in flight or unknown only because its lease
// lapsed, it is deleted with a release event saying why; any other record (none, another
// claim, an outcome) is left as it is. The call never ran, so the next attempt runs it.

// ClaimDoubter may be implemented by a store that, for a claim whose answer it lost, keeps a
// doubt it settles later by finding that claim in the ledger (PostgreSQL's one-statement
// claims, with the counters they carried). ClaimInDoubt says whether it still holds such a
// doubt about intent. The engine releases a lost claim only once the store holds none: the
// release removes the claim, which the store would then read as never recorded, and add the
// counters that came with it a second time.
type ClaimDoubter interface {
	ClaimInDoubt(intent string) bool
}

// lostClaim is a claim Prepare wrote and could not confirm (or gave up: beside.go); reason, if
// set, is its release's reason in place of lostClaimReason.
type lostClaim struct{ intent, nonce, reason string }

// lostClaims are the claims this engine has yet to release, and the goroutine releasing them.
type lostClaims struct {
	mu      sync.Mutex
	list    []lostClaim
	running bool
	stop    chan struct{} // closed by Close
	ctx     context.Context
	cancel  context.CancelFunc // ends the background tries, with stop
	done    sync.WaitGroup
}

var errClaimInDoubt = errors.New("the store has yet to settle the claim")

// lostClaimReason is the release event's reason.
const lostClaimReason = "the ledger's answer to this claim was lost, so its call was never run: released once the ledger answered"

// Delays between tries at releasing lost claims while the ledger does not answer.
var (
	lostClaimFirst = 100 * time.Millisecond
	lostClaimMax   = 2 * time.Second
)

// lostClaim notes a claim (intent, nonce) whose Prepare failed after writing it, and starts
// releasing it in the background.
func (e *Engine) lostClaim(intent, nonce string) { e.lostClaimWhy(intent, nonce, "") }

// lostClaimNoted is lostClaim for a claim whose Prepare is about to fail. While the store
// doubts it (ClaimDoubter), it may land after this process ends, with nobody left to release
// it: a SQLite COMMIT whose fsync failed leaves valid frames in the log, which the next open
// counts once this process is gone (killed before it wrote again). So it is also abandoned
// (beside.go): its note goes to the spool before Prepare answers (unless the disk takes no
// write either), and the next process's drain releases the claim if it finds it. Before
// 2026-12-07 such a call was answered NOT executed, and after a kill -9 its retry was refused
// as of unknown outcome (TestClaimWhoseSyncFailedIsReleasedAfterAKill).
func (e *Engine) lostClaimNoted(intent, nonce string) {
	d, ok := e.store.(ClaimDoubter)
	if !ok || e.cfg.SpoolDir == "" || !d.ClaimInDoubt(intent) {
		e.lostClaim(intent, nonce)
		return
	}
	e.abandoned.add(nonce, &abandonedClaim{intent: intent, reason: lostClaimReason})
	linked := make(chan struct{})
	go e.noteAbandoned(intent, lostClaimReason, []string{nonce}, linked)
	t := time.NewTimer(noteWait)
	select {
	case <-linked:
	case <-t.C:
	}
	t.Stop()
	e.lostClaim(intent, nonce)
}

// lostClaimWhy is lostClaim whose release says reason (lostClaimReason if empty).
func (e *Engine) lostClaimWhy(intent, nonce, reason string) {
	l := &e.lost
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, lostClaim{intent, nonce, reason})
	if l.running || l.stop == nil {
		return
	}
	select {
	case <-l.stop:
		return // closing: Close releases what it can
	default:
	}
	l.running = true
	l.done.Add(1)
	go e.releaseLostClaims()
}

func (e *Engine) releaseLostClaims() {
	l := &e.lost
	defer l.done.Done()
	delay := lostClaimFirst
	for {
		left := e.releaseLostOnce(l.ctx)
		l.mu.Lock()
		if left == 0 && len(l.list) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if left == 0 {
			delay = lostClaimFirst // new ones came in meanwhile
		}
		select {
		case <-time.After(delay):
		case <-l.stop:
			l.mu.Lock()
			l.running = false
			l.mu.Unlock()
			return
		}
		delay = min(2*delay, lostClaimMax)
	}
}

// releaseLostOnce tries once to release each lost claim and returns how many are left.
func (e *Engine) releaseLostOnce(ctx context.Context) int {
	l := &e.lost
	l.mu.Lock()
	list := l.list
	l.list = nil
	l.mu.Unlock()
	var left []lostClaim
	for _, c := range list {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := e.releaseLost(cctx, c)
		cancel()
		if err != nil {
			left = append(left, c)
		} else {
			e.forgetAbandoned(c.nonce) // released, or known never to have landed
		}
	}
	l.mu.Lock()
	l.list = append(l.list, left...)
	l.mu.Unlock()
	return len(left)
}

// releaseLost deletes the record of intent c.intent if it is the claim c, still in flight or
// unknown only because its lease lapsed or its holder looked gone (Healable).
func (e *Engine) releaseLost(ctx context.Context, c lostClaim) error {
	_, err := e.releaseLostFound(ctx, c)
	return err
}

// releaseLostFound is releaseLost that also reports whether it found the claim holding its
// intent (and so released it).
func (e *Engine) releaseLostFound(ctx context.Context, c lostClaim) (bool, error) {
	if d, ok := e.store.(ClaimDoubter); ok && d.ClaimInDoubt(c.intent) {
		// The store settles it at the start of a later write of this process's (a call, a
		// heartbeat); writing here to hurry it would also try, while the ledger is away, to
		// settle the store's other doubts, and put their settling off (doubtRetry).
		return false, errClaimInDoubt
	}
	ours := func(rec *Record) bool {
		return rec != nil && rec.Nonce == c.nonce && (rec.State == StateInFlight || rec.Healable())
	}
	// Read first: most lost claims never landed, and a read costs the ledger no write (no
	// transaction to commit, no WAL, on a shared ledger no receipt).
	found := false
	if err := e.store.View(ctx, func(tx Tx) error {
		rec, err := tx.Get(c.intent)
		found = ours(rec)
		return err
	}); err != nil || !found {
		return false, err
	}
	reason := c.reason
	if reason == "" {
		reason = lostClaimReason
	}
	found = false
	err := e.update(ctx, func(tx Tx) error {
		rec, err := tx.Get(c.intent)
		if found = ours(rec); err != nil || !found {
			return err
		}
		now := tx.Now()
		if err := tx.Delete(c.intent); err != nil {
			return err
		}
		return tx.AppendEvent(Event{At: now, Intent: c.intent, Kind: EventRelease, Who: e.cfg.Owner, Reason: reason, State: rec.State, Token: rec.Token})
	})
	return found && err == nil, err
}

// closeLostClaims stops the background releases and tries once more, within ctx.
func (e *Engine) closeLostClaims(ctx context.Context) {
	l := &e.lost
	l.mu.Lock()
	if l.stop != nil {
		select {
		case <-l.stop:
		default:
			close(l.stop)
			l.cancel() // a try waiting on a ledger that does not answer ends now
		}
	}
	l.mu.Unlock()
	l.done.Wait()
	l.mu.Lock()
	n := len(l.list)
	l.mu.Unlock()
	if n > 0 {
		e.releaseLostOnce(ctx)
	}
}
