package fence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Claims answered before they landed.
//
// A claim's write can outlive every bound its caller has: SQLite blocked inside the kernel (the
// ledger's file system frozen by fsfreeze, as backup and snapshot tools do, or a network disk
// that hangs) ends with its context only once the disk answers. A caller that must answer its
// agent meanwhile (wrap's call, serve's fence_prepare) answers "NOT run, a retry may run it"
// and gives the claim up: PrepareWaitBeside. The claim may land all the same once the disk
// answers, held by nobody who will run it, so the engine releases it, its call never sent.
//
// Until 2026-12-06 that release was the caller's, once the claim's write returned, and it
// missed two cases:
//   - a retry the agent sent meanwhile, queued behind the claim for the ledger's writer, read
//     it first: its lease long lapsed, its holder this very process, the lease rules made it
//     unknown, and the retry was refused prior_failure though nothing had run
//     (TestRetrySentWhileTheLateClaimIsHeldIsNotToldTheCallMayHaveRun);
//   - a process stopped before its claim landed (an MCP client closing wrap, then killing
//     it) left the claim with nobody to release it, and the next process made it unknown,
//     its holder gone: fenced until an operator cleared it
//     (TestClaimThatLandsAsWrapStopsDoesNotFenceTheRetry).
//
// So the engine notes the nonce of each claim such a Prepare writes before the write commits
// (claimNote). Given up, the claim is abandoned: every pass of this engine that meets it (an
// in-flight or healable record with its nonce) releases it first, as never run, and goes on
// as if the intent were free; and a note of it goes to the spool (Config.SpoolDir), which
// the next drain of any process sharing the spool applies: the claim, if it is in the
// ledger, is released at once; a note whose claim is not there waits while its writer runs
// (the claim may still land) and is dropped once it is gone. A Prepare given up before it
// writes its claim writes none.

// ErrClaimStuck is PrepareWaitBeside's error for a claim whose write had not returned
// stuckWait after ctx ended. The call was not admitted: nothing may run, and a retry may.
var ErrClaimStuck = errors.New("the ledger's write of the claim has not returned, its context ended (a disk that does not answer: a frozen file system, a hung network disk)")

// OutcomeUnsent is the kind of a spool note of an abandoned claim (never reported to Settle):
// its Ticket has the claim's intent and nonce, and no token.
const OutcomeUnsent OutcomeKind = "unsent"

// claimNote collects the nonces of the claims one Prepare writes, until it is abandoned.
type claimNote struct {
	mu        sync.Mutex
	nonces    []string
	abandoned bool
}

// claiming is asked by the gate before it writes a claim with nonce: false once the note was
// abandoned (the claim is not written); true, the nonce noted first.
func (n *claimNote) claiming(nonce string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.abandoned {
		return false
	}
	n.nonces = append(n.nonces, nonce)
	return true
}

// abandon marks the note abandoned and returns the nonces of the claims written so far.
func (n *claimNote) abandon() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.abandoned = true
	return n.nonces
}

// errAbandonedBeforeClaim is the gate's error for a Prepare abandoned before it wrote its claim.
var errAbandonedBeforeClaim = errors.New("fence: the call was answered before its claim was written; the claim is not written")

// abandonedClaim is a claim given up before its write returned.
type abandonedClaim struct {
	intent, reason string
	pending        bool   // its Prepare has not returned yet
	note           string // its spool note's path, "" if none was written (yet)
}

// abandonedClaims are this engine's abandoned claims by nonce; n counts them, so a pass
// meets the lock only when there are some.
type abandonedClaims struct {
	n  atomic.Int32
	mu sync.Mutex
	m  map[string]*abandonedClaim
}

func (a *abandonedClaims) add(nonce string, c *abandonedClaim) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]*abandonedClaim{}
	}
	if _, ok := a.m[nonce]; !ok {
		a.n.Add(1)
	}
	a.m[nonce] = c
}

// get returns the abandoned claim of nonce, if any.
func (a *abandonedClaims) get(nonce string) (abandonedClaim, bool) {
	if a.n.Load() == 0 || nonce == "" {
		return abandonedClaim{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.m[nonce]
	if !ok {
		return abandonedClaim{}, false
	}
	return *c, true
}

// settled marks nonce's Prepare returned.
func (a *abandonedClaims) settled(nonce string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.m[nonce]; ok {
		c.pending = false
	}
}

// noted sets nonce's spool note, and reports whether nonce is still abandoned: false once it
// was forgotten (its claim released, by a retry that met it, while its note was being
// written), when the note is the caller's to remove.
func (a *abandonedClaims) noted(nonce, path string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.m[nonce]
	if ok {
		c.note = path
	}
	return ok
}

// forget drops nonce (its claim released, or known never to land) and returns its note.
func (a *abandonedClaims) forget(nonce string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.m[nonce]
	if !ok {
		return ""
	}
	delete(a.m, nonce)
	a.n.Add(-1)
	return c.note
}

// abandonedMet is the gate's error for a record that is one of this engine's abandoned claims:
// the pass releases it and asks again (pooledPass.prepare).
type abandonedMet struct {
	intent, nonce, reason string
}

func (a abandonedMet) Error() string {
	return fmt.Sprintf("fence: intent %q is held by a claim this process gave up before it landed", a.intent)
}

// metAbandoned says whether rec is one of this engine's abandoned claims, still holding its
// intent (in flight, or unknown only by the lease rules).
func (e *Engine) metAbandoned(rec *Record) (abandonedMet, bool) {
	if e.abandoned.n.Load() == 0 || (rec.State != StateInFlight && !rec.Healable()) {
		return abandonedMet{}, false
	}
	c, ok := e.abandoned.get(rec.Nonce)
	if !ok {
		return abandonedMet{}, false
	}
	return abandonedMet{intent: rec.Intent, nonce: rec.Nonce, reason: c.reason}, true
}

// releaseAbandoned releases the abandoned claim a pass met, and forgets it once released.
func (e *Engine) releaseAbandoned(ctx context.Context, a abandonedMet) error {
	if err := e.releaseLost(ctx, lostClaim(a)); err != nil {
		return err
	}
	e.forgetAbandoned(a.nonce)
	return nil
}

// forgetAbandoned drops nonce from the abandoned claims and removes its spool note.
func (e *Engine) forgetAbandoned(nonce string) {
	if p := e.abandoned.forget(nonce); p != "" {
		_ = e.spool.remove(p)
	}
}

// prepared is the answer of a Prepare run beside its caller.
type prepared struct {
	adm      Admission
	decision Decision
	err      error
}

// PrepareWaitBeside is PrepareWaitUncounted whose answer does not wait for a store that cannot
// stop. The Prepare runs beside the caller; if it has not returned stuckWait after ctx ended,
// PrepareWaitBeside returns ErrClaimStuck (not admitted: run nothing) and the claim is
// abandoned: written later, it is released as never run (reason says why, for the audit
// trail), by this engine, by any pass of it that meets the claim first, or, if this process
// ends before it lands, by the next drain of the spool once this process is gone. stuckWait
// should be longer than the store takes to give up once ctx ended (PostgreSQL's 5 s to ask
// whether a claim whose answer was lost was recorded).
func (e *Engine) PrepareWaitBeside(ctx context.Context, req Request, maxWait time.Duration, giveUp <-chan struct{}, stuckWait time.Duration, reason string) (Admission, Decision, error) {
	return e.PrepareWaitBesideWith(ctx, req, maxWait, giveUp, stuckWait, reason, nil)
}

// PrepareWaitBesideWith is PrepareWaitBeside for a call that may ask the ledger again, as
// PrepareWaitWith is: w carries what its waiting learned from one ask to the next (nil: a
// call that asks once). w is written only when the Prepare's answer is returned: the Prepare
// runs on a copy, so one given up (ErrClaimStuck) never writes it later.
func (e *Engine) PrepareWaitBesideWith(ctx context.Context, req Request, maxWait time.Duration, giveUp <-chan struct{}, stuckWait time.Duration, reason string, w *Waited) (Admission, Decision, error) {
	note := &claimNote{}
	var mine *Waited
	if w != nil {
		c := *w
		mine = &c
	}
	done := make(chan prepared, 1)
	go func() {
		adm, decision, err := e.prepareWait(ctx, req, maxWait, giveUp, note, mine)
		done <- prepared{adm, decision, err}
	}()
	var stuck <-chan time.Time
	ended := ctx.Done()
	for {
		select {
		case p := <-done:
			if w != nil {
				*w = *mine
			}
			return p.adm, p.decision, p.err
		case <-ended:
			ended = nil
			t := time.NewTimer(stuckWait)
			defer t.Stop()
			stuck = t.C
		case <-stuck:
			nonces := note.abandon()
			for _, n := range nonces {
				e.abandoned.add(n, &abandonedClaim{intent: req.Intent, reason: reason, pending: true})
			}
			linked := make(chan struct{})
			go e.abandonClaims(req.Intent, reason, nonces, done, linked)
			// The notes are in the spool before the answer, unless the disk does not take
			// them either: a process stopped as soon as its agent has the answer leaves them.
			t := time.NewTimer(noteWait)
			select {
			case <-linked:
			case <-t.C:
			}
			t.Stop()
			return Admission{}, Decision{}, ErrClaimStuck
		}
	}
}

// abandonClaims keeps a note of each abandoned claim in the spool and, once their Prepare
// returned (done), hands them to the lost claims (orphan.go): released if they landed. The
// hand-off does not wait for the notes: the spool's disk may hang where the ledger does not
// (a PostgreSQL ledger's spool in the state directory), and the release waited for it
// (TestClaimGivenUpIsReleasedWhileItsNoteCannotBeWritten). linked is closed once every note
// is in the spool (or failed to be), before their syncs.
func (e *Engine) abandonClaims(intent, reason string, nonces []string, done <-chan prepared, linked chan struct{}) {
	if e.cfg.SpoolDir == "" || len(nonces) == 0 {
		close(linked)
	} else {
		go e.noteAbandoned(intent, reason, nonces, linked)
	}
	<-done
	for _, n := range nonces {
		e.abandoned.settled(n)
		e.lostClaimWhy(intent, n, reason)
	}
}

// noteAbandoned writes the spool note of each abandoned claim of intent, and closes linked once
// each is linked into place or failed to be.
func (e *Engine) noteAbandoned(intent, reason string, nonces []string, linked chan struct{}) {
	var once sync.Once
	left := len(nonces)
	for _, n := range nonces {
		o := Outcome{Kind: OutcomeUnsent, Ticket: Ticket{Intent: intent, Nonce: n}, Reason: reason, Owner: e.cfg.Owner, At: time.Now()}
		// Beside the write it waits for: on a frozen disk this waits too, and a process
		// stopped meanwhile leaves what it wrote (see putNote). A note put there with an
		// error (its sync failed) is removed as one that was not; and one whose claim was
		// forgotten meanwhile (released by a retry that met it, or by the lost claims) is
		// removed at once: nobody else would (TestNoteIsRemovedOnceItsClaimIsReleased).
		path, _ := e.spool.putNote(e.cfg.SpoolDir, o, func() {
			if left--; left == 0 {
				once.Do(func() { close(linked) })
			}
		})
		if path != "" && !e.abandoned.noted(n, path) {
			_ = e.spool.remove(path)
		}
	}
	once.Do(func() { close(linked) }) // a note that failed before its link
}

// noteName is the spool name of an abandoned claim's note: its intent's digest, "unsent" and
// its nonce's digest.
func noteName(o Outcome) string {
	h := sha256.Sum256([]byte(o.Ticket.Nonce))
	return spoolPrefix(o.Ticket.Intent) + "unsent-" + hex.EncodeToString(h[:8]) + ".json"
}

// putNote writes o, an abandoned claim's note, into the spool dir. Unlike an outcome's file
// it is linked into place before it is synced: it is written while the disk may not answer
// syncs (the very reason the claim was abandoned), and a process stopped while its sync
// waits must leave it where the next drain finds it. A note torn by a crash is removed by the
// drain (all it does is spare a claim that never ran from being fenced).
func (s *spool) putNote(dir string, o Outcome, linked func()) (string, error) {
	// The directory is made first (the ledger's, beside it, exists) and its entry synced last,
	// for the same reason.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	b, err := marshalRaw(spooled{Outcome: o})
	if err != nil {
		return "", err
	}
	final := filepath.Join(dir, noteName(o))
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", err
	}
	_, werr := f.Write(append(b, '\n'))
	if werr == nil {
		werr = os.Link(f.Name(), final)
		if errors.Is(werr, os.ErrExist) {
			werr = nil
		}
	}
	os.Remove(f.Name())
	if werr == nil {
		linked()
	}
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return final, err
	}
	return final, errors.Join(syncDir(dir), syncDir(filepath.Dir(dir)))
}

// noteWait bounds how long PrepareWaitBeside's answer waits for its notes to be in the spool
// (written and linked, not synced): a disk that takes no write has them wait with it.
const noteWait = time.Second

// errNotYet: a spool note whose claim may still land (its writer runs); it waits.
var errNotYet = errors.New("fence: a note of a claim that may still land")

// drainNote applies o, a note of an abandoned claim found in the spool: the claim, if it is
// the intent's record (in flight, or unknown only by the lease rules), is released; the note
// stays while the claim may still land (its Prepare in this process has not returned, or its
// writer, another process, runs) and the claim is not there.
func (e *Engine) drainNote(ctx context.Context, o Outcome) error {
	n := o.Ticket.Nonce
	if c, ok := e.abandoned.get(n); ok && c.pending {
		return errNotYet
	}
	found, err := e.releaseLostFound(ctx, lostClaim{o.Ticket.Intent, n, o.Reason})
	switch {
	case errors.Is(err, errClaimInDoubt):
		return errNotYet
	case err != nil:
		return err
	case !found && o.Owner != "" && !e.mine(o.Owner) && e.cfg.Liveness(o.Owner) != Dead:
		return errNotYet
	case !found && e.cfg.SpoolShared:
		return errNotOurs // it may be another ledger's claim, as a shared spool's outcomes may
	}
	e.abandoned.forget(n)
	return nil
}

// isNoteName says whether a spool path is an abandoned claim's note (noteName).
func isNoteName(path string) bool {
	name := filepath.Base(path)
	return len(name) > 24 && name[16:24] == "-unsent-"
}
