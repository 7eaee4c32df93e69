package fence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/effectfence/effectfence/internal/durabledir"
	"github.com/effectfence/effectfence/pkg/canon"
)

// OutcomeKind names how an admitted attempt ended.
type OutcomeKind string

const (
	OutcomeCommit  OutcomeKind = "commit"  // it ran: Result is recorded in a cert
	OutcomeRelease OutcomeKind = "release" // it definitely did not run: the intent is free
	// OutcomeFailure is a release of a call that ran and failed definitely (the tool answered
	// an error): the intent is free, and the waiters on this claim in other processes are
	// given the failure rather than run the call again (FailedWaitError).
	OutcomeFailure OutcomeKind = "failure"
	OutcomeAbort   OutcomeKind = "abort" // it may have run: failed, fenced
	OutcomeLost    OutcomeKind = "lost"  // the holder lost track of it: unknown, fenced
)

// Outcome is what a holder reports about its ticket, in a form that can wait in a spool.
type Outcome struct {
	Kind   OutcomeKind     `json:"kind"`
	Ticket Ticket          `json:"ticket"`
	Result json.RawMessage `json:"result,omitempty"`
	Reason string          `json:"reason,omitempty"`
	// At is when the holder learned the outcome (informational).
	At time.Time `json:"at"`
	// Owner, on a spool note of an abandoned claim (OutcomeUnsent), is the process that gave
	// it up: the note waits while that process runs and the claim may still land.
	Owner string `json:"owner,omitempty"`
}

// SpooledError: the ledger did not take an outcome before the context ended; it is kept in a
// local spool file and recorded by the next Recover or DrainSpool of a process on this host
// using the same spool (the next start of the same ledger).
type SpooledError struct {
	Path string
	Err  error
}

func (e SpooledError) Error() string {
	return fmt.Sprintf("the ledger did not take the outcome (%v); it is kept in %s and will be recorded when the ledger answers or at the next start", e.Err, e.Path)
}
func (e SpooledError) Unwrap() error { return e.Err }

// apply reports o to the ledger once. retry says an earlier report of o failed with the
// ledger's error (Settle tries again, or o waited in the spool or in memory), so it may have
// landed all the same, its answer lost: a report that finds o already recorded is then
// answered as that one would have been (a commit's cert, or its stale_read_set; nil for a
// release, abort or lost) and writes nothing. Otherwise a second report of one ticket is
// refused lease_lost, as always.
func (e *Engine) apply(ctx context.Context, o Outcome, retry bool) (*Cert, error) {
	switch o.Kind {
	case OutcomeCommit:
		return e.commit(ctx, o.Ticket, o.Result, retry)
	case OutcomeRelease:
		return nil, e.end(ctx, o.Ticket, EventRelease, o.Reason, retry)
	case OutcomeFailure:
		return nil, e.end(ctx, o.Ticket, EventFailure, o.Reason, retry)
	case OutcomeAbort:
		return nil, e.end(ctx, o.Ticket, EventAbort, o.Reason, retry)
	case OutcomeLost:
		return nil, e.end(ctx, o.Ticket, EventLost, o.Reason, retry)
	}
	return nil, InvalidError{"kind", fmt.Sprintf("%q: want commit, release, failure, abort or lost", o.Kind)}
}

// Settle reports an outcome and never drops it. It tries the ledger and, while the ledger
// fails (an error without a fence code: the database is unreachable, the disk is full), keeps
// the outcome in the spool (Config.SpoolDir, written and fsynced before Settle waits) and
// retries with the same ticket, backing off from 50 ms to 2 s, until the ledger answers or ctx
// ends. A try the ledger does not answer within its bound (2 s, doubling to 32 s) counts as
// failed. Retrying is safe: a commit that landed but whose answer was lost returns the recorded
// cert, and a claim that went unknown meanwhile is healed by its own late settle. The ledger's
// answer, a cert or a refusal, is returned as Commit, Release, Abort or Lost return it. When ctx
// ends first, or the engine is closed (Close) while the ledger has not taken the outcome, the
// error is a SpooledError (the outcome waits in the spool for DrainSpool) or, with no spool,
// the ledger's last error. A spool that could not take the outcome (tried
// again every round) leaves it held in memory (up to maxHeld bytes of results in all), and
// DrainSpool (every Recover) tries the ledger and the spool again while the process runs.
// An outcome answered as kept stands against every later report of its ticket (Settle, Commit,
// Release, Abort, Lost): it is recorded first, and the later one is judged against it as a
// second report is (a release after a commit is refused lease_lost).
func (e *Engine) Settle(ctx context.Context, o Outcome) (*Cert, error) {
	if o.At.IsZero() {
		o.At = time.Now()
	}
	if err := e.standing(ctx, o); err != nil {
		return nil, err
	}
	var spooled string
	var spoolErr error // why the outcome is not in the spool yet, if keeping it there failed
	wait := settleFirstWait
	// An outcome this engine holds in memory was reported before and failed with the ledger's
	// error (a Settle whose context ended: wrap settles again, round after round, until the
	// outcome is kept): it may have landed, its answer lost, so even the first report of this
	// call is a retry of it. So is a release, abort or lost answered as kept in the spool
	// before (SpooledError) and recorded since by a drain, reported again by its holder (serve's
	// agent calling the tool again, as docs/serve.md says it may): the ledger shows that claim's
	// very report (its kind, token and reason), which is then answered as recorded; before, it
	// was refused lease_lost, "nothing was recorded", and audited as a late result
	// (TestSettleAgainOfASpooledOutcomeAfterItsDrain). A report the ledger does not show so is
	// refused lease_lost as always.
	try := settleFirstTry
	for retry := e.spool.reportedBefore(o) || o.Kind != OutcomeCommit; ; retry = true {
		// A try the ledger does not answer within try is ended, and the outcome kept in the
		// spool before the next: one sent over a connection that no longer answers (a
		// PostgreSQL server that failed over, a NAT that forgot it: no reset, the kernel
		// retransmitting for minutes) held the Settle until ctx ended, the outcome in
		// neither the ledger nor the spool, though the ledger answered a new connection
		// (TestSettleOverAConnectionThatNoLongerAnswersIsTriedAgain). Each try waits twice
		// as long as the last, so a ledger that is only slow is not cut short for good.
		tctx, cancel := context.WithTimeout(ctx, try)
		cert, err := e.apply(tctx, o, retry)
		cancel()
		try = min(try*2, settleMostTry)
		var coded Coded
		if err == nil || errors.As(err, &coded) {
			e.spool.unhold(o) // answered: the next drain need not report it again
			if spooled != "" {
				if rerr := e.spool.remove(spooled); rerr != nil {
					return cert, errors.Join(err, rerr)
				}
			}
			return cert, err
		}
		if spooled == "" && e.cfg.SpoolDir != "" {
			// A spool that cannot take the outcome (a full disk, most likely the ledger's
			// own trouble too) is no reason to stop trying the ledger: both are tried again
			// next round, and whichever has room first keeps the outcome.
			var lost error
			e.keep(o, func() { spooled, spoolErr = e.spool.put(e.cfg.SpoolDir, o) }, &lost)
			var other otherReportError
			if lost == nil && errors.As(spoolErr, &other) {
				// Kept by another process sharing the spool since this one looked (see keep).
				e.counts.add(bLeaseLost)
				lost = LeaseLostError{Intent: o.Ticket.Intent, Token: o.Ticket.Token,
					Why: fmt.Sprintf("this claim's %s, reported at the same time, waits to be recorded and stands; this %s is not recorded", other.w.Kind, o.Kind)}
			}
			if lost != nil {
				return nil, lost
			}
			if spoolErr != nil {
				spooled = ""
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			wait = min(wait*2, settleMaxWait)
			continue
		case <-ctx.Done():
		case <-e.lost.stop:
			// The engine was closed: its store never answers again, and a Settle given a
			// context that never ends retried for ever (TestSettleEndsWhenItsEngineCloses).
			// What waits in the spool is recorded by the next process opening the ledger.
		}
		t.Stop()
		if spooled != "" {
			return nil, SpooledError{Path: spooled, Err: err}
		}
		if spoolErr != nil {
			select {
			case <-e.lost.stop:
				// Closed: no Recover or drain of this engine runs again, so holding the outcome
				// in memory would promise a retry that never comes
				// (TestSettleEndingAtCloseDoesNotPromiseARetry).
				return nil, fmt.Errorf("%w; and keeping the outcome in the spool failed too (%v), and the engine is closed: nothing in this process reports it again, and its claim stays in flight, judged by the lease rules", err, spoolErr)
			default:
			}
			held, lost := false, error(nil)
			e.keep(o, func() { held = e.spool.hold(o) }, &lost)
			if lost != nil {
				return nil, lost
			}
			if held {
				return nil, fmt.Errorf("%w; and keeping the outcome in the spool failed too (%v): it is held in this process's memory, and every Recover tries the ledger and the spool again while the process runs", err, spoolErr)
			}
			return nil, fmt.Errorf("%w; and keeping the outcome in the spool failed too: %v", err, spoolErr)
		}
		return nil, err
	}
}

// standing refuses o when another report of its claim waits to be recorded, in the spool or in
// memory: that one was answered as kept ("will be recorded"), so it stands. Recorded first (the
// drain), o is then judged against it as any second report is (a commit of another result gets
// the recorded cert, a release or abort after a commit lease_lost). Before 2026-12-06 a second
// Settle went ahead: its spool file replaced the waiting one (one file per ticket), or it
// reached the ledger first, so a release after a spooled commit freed the intent and the next
// attempt ran the effect a second time. Commit, Release, Abort and Lost ask it too: made
// directly after a Settle whose outcome was spooled (a caller's clean-up releasing a ticket
// whose Settle returned an error), they did the same until 2026-12-06
// (TestDirectReportAfterASpooledCommitIsRefused). Without a spool nothing is ever kept, and
// nothing is asked.
func (e *Engine) standing(ctx context.Context, o Outcome) error {
	if e.cfg.SpoolDir == "" {
		return nil
	}
	w, ok := e.waiting(o)
	if !ok || sameReport(w, o) {
		return nil
	}
	// Judged by w alone: a drain also fails on files of other claims (one that is not an
	// outcome, left for an operator; another ledger's), and its error refused o though w had
	// just been recorded (TestDirectCommitAfterADrainThatFailedElsewhere).
	_, _ = e.DrainSpool(ctx)
	if !e.reportGone(w) {
		e.counts.add(bLeaseLost) // a refused report, as the ledger's refusal of a second one is
		return LeaseLostError{Intent: o.Ticket.Intent, Token: o.Ticket.Token,
			Why: fmt.Sprintf("this claim's %s, reported before, waits in the spool to be recorded and stands; this %s is not recorded", w.Kind, o.Kind)}
	}
	return nil
}

// reportGone reports whether w, which waited, no longer does: it is neither held in memory
// nor in a spool file, readable or not (a drain removes a file only once the ledger answered
// it, and a held outcome is forgotten only once the ledger or the spool took it).
func (e *Engine) reportGone(w Outcome) bool {
	if _, ok := e.spool.heldOf(w); ok {
		return false
	}
	for _, n := range spoolNames(w) {
		if _, err := os.Lstat(filepath.Join(e.cfg.SpoolDir, n)); !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}

// keep runs put, which keeps o in the spool or in memory, unless another report of o's claim
// waits there (kept by a Settle of this engine running at the same time: both had passed
// Settle's first look), which stands: lost is then set to the refusal, and put is not run.
// The look and put are one step for this engine's Settles, so one of two reports of a claim
// made at once is kept, never both (the second replaced the first's file, one per ticket, or
// its place in memory: TestTwoReportsOfOneClaimAtOnceAreNotBothKept).
func (e *Engine) keep(o Outcome, put func(), lost *error) {
	e.spool.kmu.Lock()
	defer e.spool.kmu.Unlock()
	if w, ok := e.waiting(o); ok && !sameReport(w, o) {
		e.counts.add(bLeaseLost)
		*lost = LeaseLostError{Intent: o.Ticket.Intent, Token: o.Ticket.Token,
			Why: fmt.Sprintf("this claim's %s, reported at the same time, waits to be recorded and stands; this %s is not recorded", w.Kind, o.Kind)}
		return
	}
	put()
}

// Settle waits settleFirstWait before its first retry, doubling up to settleMaxWait; it gives
// its first try settleFirstTry to be answered, each next one twice the last's, up to
// settleMostTry.
const (
	settleFirstWait = 50 * time.Millisecond
	settleMaxWait   = 2 * time.Second
	settleFirstTry  = 2 * time.Second
	settleMostTry   = 32 * time.Second
)

// DrainSpool reports every outcome waiting in the spool to the ledger once, removing each the
// ledger answers (with a cert or a refusal; a refused late result stays in the audit trail).
// It returns how many it removed; outcomes the ledger still cannot take stay for the next call.
func (e *Engine) DrainSpool(ctx context.Context) (int, error) {
	if e.cfg.SpoolDir == "" {
		return 0, nil
	}
	n, herr := e.settleHeld(ctx)
	m, err := e.spool.drain(ctx, e.cfg.SpoolDir, func(o Outcome) error {
		if o.Kind == OutcomeUnsent {
			return e.drainNote(ctx, o)
		}
		held, known, err := e.claimKnown(ctx, o.Ticket)
		switch {
		case err != nil:
			return err
		case held:
		case e.cfg.SpoolShared:
			return errNotOurs
		case !known && o.Ticket.Nonce != "":
			return errNoTrace
		}
		_, err = e.apply(ctx, o, true)
		return err
	})
	return n + m, errors.Join(herr, err)
}

// errNotOurs: a spooled outcome of a claim this ledger does not hold, left in a shared spool
// (Config.SpoolShared) for its own ledger.
var errNotOurs = errors.New("fence: an outcome of another ledger's claim")

// errNoTrace: a spooled outcome of an intent the ledger has neither a record nor an event of.
var errNoTrace = errors.New("fence: an outcome of a claim the ledger has no trace of")

// claimKnown reports whether the ledger holds the claim of ticket t (a record of its intent
// with its token and nonce: in flight, unknown, or done by it; the nonce, drawn at random for
// each claim, tells this ledger's claim from another's of the same intent and token), and
// whether it knows the intent at all (a record, or an event of it).
func (e *Engine) claimKnown(ctx context.Context, t Ticket) (held, known bool, err error) {
	err = e.store.View(ctx, func(tx Tx) error {
		rec, err := tx.Get(t.Intent)
		if err != nil {
			return err
		}
		held, known = holdsClaim(rec, t), rec != nil
		if known {
			return nil
		}
		return tx.Events(t.Intent, func(Event) bool {
			known = true
			return false
		})
	})
	return held && err == nil, known && err == nil, err
}

// SpoolHolds lists the outcome files of the spool dir whose claims the ledger st holds (a
// record of the ticket's intent with its token and nonce): this ledger's outcomes, kept beside
// a name it had, where another ledger may be now. A file that cannot be read is not listed.
func SpoolHolds(ctx context.Context, st Store, dir string) ([]string, error) {
	names, err := spoolEntries(dir, "")
	if err != nil {
		return nil, err
	}
	var ours []string
	for _, name := range names {
		b, err := readSpoolFile(name)
		if err != nil {
			continue
		}
		o, err := decodeSpooled(b)
		if err != nil {
			continue
		}
		held := false
		if err := st.View(ctx, func(tx Tx) error {
			rec, err := tx.Get(o.Ticket.Intent)
			held = err == nil && holdsClaim(rec, o.Ticket)
			return err
		}); err != nil {
			return nil, err
		}
		if held {
			ours = append(ours, name)
		}
	}
	return ours, nil
}

// DrainedFor is for a call that Prepare refused with err, and reports whether the caller should
// ask Prepare again, once. An intent of unknown outcome (PriorFailureError) may be unknown only
// because its outcome still waits in this ledger's spool or in this engine's memory: the ledger
// failed when the outcome came, and no Recover has recorded it yet. Telling anyone then that
// the outcome is unknown would be wrong (a person told to decide, answering "did not happen",
// would run the effect a second time). So when an outcome of that intent waits, DrainedFor
// records what waits (DrainSpool) and says to ask again unless the outcome still waits after
// that (the ledger still cannot take it). When nothing of an intent refused as unknown waits,
// another process of this host may have recorded its outcome since Prepare read the ledger (a
// drain removes its file once the ledger holds the outcome): DrainedFor reads the record and
// says to ask again if it is no longer unknown. One read, on a path that is already a refusal;
// a refusal that still stands is not asked, and so not counted, twice. A caller that asks again
// counts only the answer it then gets (PrepareWaitUncounted), not the refusal beside it.
func (e *Engine) DrainedFor(ctx context.Context, err error) (bool, error) {
	var pf PriorFailureError
	if !errors.As(err, &pf) {
		return false, nil
	}
	if !e.waits(pf.Intent) {
		if pf.State != StateUnknown {
			return false, nil
		}
		return e.decidedSince(ctx, pf.Intent)
	}
	// The drain is not cut short by the caller's agent (what it records is recorded for every
	// duplicate), but it ends after drainedForBound: a ledger that does not answer (a server
	// stopped, a disk that hangs) held the call for as long, its agent's cancellation detached.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainedForBound)
	defer cancel()
	n, derr := e.DrainSpool(dctx)
	if derr != nil && dctx.Err() != nil {
		derr = fmt.Errorf("the ledger did not take what waits in the spool within %s (it does not answer); it waits there for the next drain: %w", drainedForBound, derr)
	}
	return n > 0 || !e.waits(pf.Intent), derr
}

// drainedForBound bounds DrainedFor's drain. A drain the ledger answers takes milliseconds an
// outcome; one it does not leaves the call refused as it was, the outcome waiting, and says
// why (TestDrainForACallEndsWhileTheServerDoesNotAnswer).
const drainedForBound = 10 * time.Second

// decidedSince reports whether the ledger's record of an intent refused as unknown is no
// longer unknown (its outcome was recorded, or it was cleared or resolved).
func (e *Engine) decidedSince(ctx context.Context, intent string) (bool, error) {
	changed := false
	err := e.store.View(ctx, func(tx Tx) error {
		rec, err := tx.Get(intent)
		changed = err == nil && (rec == nil || rec.State != StateUnknown)
		return err
	})
	return changed && err == nil, err
}

// waits reports whether an outcome of intent waits in the spool or in this engine's memory.
func (e *Engine) waits(intent string) bool { return e.spooledFor(intent) || e.spool.holds(intent) }

// settleHeld reports to the ledger once each outcome held in memory (see Settle), returning
// how many it took. One the ledger still cannot take goes into the spool if that has room
// now (the drain that follows reports it), or stays held. Each stays held until the ledger or
// the spool has it: taken out of memory first, it stood against nothing while its report was
// on its way, and a Release of its ticket made meanwhile reached the ledger first, freed the
// intent and had the held commit refused (TestDirectReportWhileAHeldCommitIsDrained).
func (e *Engine) settleHeld(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	for _, o := range e.spool.heldOutcomes() {
		_, err := e.apply(ctx, o, true)
		var coded Coded
		if err == nil || errors.As(err, &coded) {
			e.spool.unhold(o)
			n++
			continue
		}
		if _, serr := e.spool.put(e.cfg.SpoolDir, o); serr == nil {
			e.spool.unhold(o)
			continue
		}
		errs = append(errs, fmt.Errorf("%s of intent %q, held in memory: %w", o.Kind, o.Ticket.Intent, err))
	}
	return n, errors.Join(errs...)
}

// waiting returns the outcome of o's claim (its intent, token and nonce) that waits in this
// engine's memory or in the spool, if one does: reported before, answered as kept, and not in
// the ledger yet. A spool file that cannot be read is not one (the drain names it).
func (e *Engine) waiting(o Outcome) (Outcome, bool) {
	if h, ok := e.spool.heldOf(o); ok {
		return h, true
	}
	if e.cfg.SpoolDir == "" {
		return Outcome{}, false
	}
	var b []byte
	err := os.ErrNotExist
	for _, n := range spoolNames(o) {
		if b, err = readSpoolFile(filepath.Join(e.cfg.SpoolDir, n)); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return Outcome{}, false
	}
	w, err := decodeSpooled(b)
	if err != nil || !sameClaim(w.Ticket, o.Ticket) {
		return Outcome{}, false
	}
	return w, true
}

// sameClaim says whether tickets a and b are of one claim: its intent, token and nonce.
func sameClaim(a, b Ticket) bool {
	return a.Intent == b.Intent && a.Token == b.Token && a.Nonce == b.Nonce
}

// holdsClaim says whether rec is the record of t's claim: its intent's, with t's token and
// nonce (drawn at random for each claim, it tells this ledger's claim from another's of the
// same intent and token).
func holdsClaim(rec *Record, t Ticket) bool {
	return rec != nil && t.Nonce != "" && rec.Token == t.Token && rec.Nonce == t.Nonce
}

// sameReport reports whether b reports what a does: the same kind and, for a commit, the same
// result (its canonical JSON, or the very bytes).
func sameReport(a, b Outcome) bool {
	if a.Kind != b.Kind {
		return false
	}
	if a.Kind != OutcomeCommit || bytes.Equal(a.Result, b.Result) {
		return true
	}
	ca, err := canon.JSON(orNull(a.Result))
	if err != nil {
		return false
	}
	cb, err := canon.JSON(orNull(b.Result))
	return err == nil && bytes.Equal(ca, cb)
}

// spool is the directory of outcomes not yet in the ledger: one JSON file per claim, written
// to a temporary name, fsynced, linked into place (see put) and the directory fsynced, so a
// file either holds a whole outcome or is absent. Draining takes an exclusive lock on the directory (where
// the OS has one, waiting for it at most spoolLockWait), so two processes of one host do not
// report one outcome twice (a second report is a retry, and changes nothing).
type spool struct {
	mu  sync.Mutex // serialises drains of this process
	kmu sync.Mutex // makes Engine.keep's look and put one step

	hmu       sync.Mutex
	held      map[string]Outcome // by spoolName: outcomes neither the ledger nor the spool took
	heldBytes int                // their results' bytes, at most maxHeld
}

// maxHeld bounds the results of the outcomes held in memory, in bytes. An outcome beyond it
// is not held: its claim stays in flight, and is judged as any other once this process ends.
const maxHeld = 64 << 20

// hold keeps o in memory for the next drain, reporting whether there was room.
func (s *spool) hold(o Outcome) bool {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	name := spoolName(o)
	if old, ok := s.held[name]; ok {
		s.heldBytes -= len(old.Result)
		delete(s.held, name)
	}
	if s.heldBytes+len(o.Result) > maxHeld {
		return false
	}
	if s.held == nil {
		s.held = map[string]Outcome{}
	}
	s.held[name] = o
	s.heldBytes += len(o.Result)
	return true
}

// reportedBefore reports whether o itself (its kind, for its ticket) is held in memory: an
// earlier Settle of it failed with the ledger's error, and neither the ledger nor the spool
// took it before that Settle's context ended. (An outcome Settle left in the spool is durable
// and answered with SpooledError: its caller waits for the drain, it does not settle again.)
func (s *spool) reportedBefore(o Outcome) bool {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if len(s.held) == 0 {
		return false
	}
	h, held := s.held[spoolName(o)]
	return held && h.Kind == o.Kind && h.Ticket.Nonce == o.Ticket.Nonce
}

// unhold forgets o if it is held in memory: the ledger has answered it.
func (s *spool) unhold(o Outcome) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if len(s.held) == 0 {
		return
	}
	name := spoolName(o)
	if h, ok := s.held[name]; ok && h.Kind == o.Kind && h.Ticket.Nonce == o.Ticket.Nonce {
		s.heldBytes -= len(h.Result)
		delete(s.held, name)
	}
}

// heldOf returns the outcome of o's claim (intent, token and nonce) held in memory, if any.
func (s *spool) heldOf(o Outcome) (Outcome, bool) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if len(s.held) == 0 {
		return Outcome{}, false
	}
	h, ok := s.held[spoolName(o)]
	return h, ok && sameClaim(h.Ticket, o.Ticket)
}

// holds reports whether an outcome of intent is held in memory.
func (s *spool) holds(intent string) bool {
	prefix := spoolPrefix(intent)
	s.hmu.Lock()
	defer s.hmu.Unlock()
	for name := range s.held {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// holdsAny reports whether any outcome is held in memory.
func (s *spool) holdsAny() bool {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	return len(s.held) > 0
}

// heldOutcomes returns the outcomes held in memory; they stay held (see settleHeld).
func (s *spool) heldOutcomes() []Outcome {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	out := make([]Outcome, 0, len(s.held))
	for _, o := range s.held {
		out = append(out, o)
	}
	return out
}

// spooled is an Outcome as a spool file holds it: the result readable in result (which
// encoding/json respaces) and exact in result_bytes, which is what gets recorded, so that a
// spooled commit replays the tool's bytes like any other. A file without result_bytes (an
// earlier build's) is recorded from result. A result that is not readable (see readable) has
// no result member: nested 10,000 levels, it made the file too deep to decode.
type spooled struct {
	Outcome
	ResultBytes []byte `json:"result_bytes,omitempty"`
}

// decodeSpooled reads a spool file's content b: its outcome, the result the tool's own bytes.
func decodeSpooled(b []byte) (Outcome, error) {
	var sp spooled
	err := json.Unmarshal(b, &sp)
	if sp.ResultBytes != nil {
		sp.Outcome.Result = sp.ResultBytes
	}
	return sp.Outcome, err
}

// spoolName is the name of o's file in the spool: its intent's digest, its token and, for a
// ticket with a nonce, the nonce's digest. Two claims of one intent with the same token (two
// ledgers' whose outcomes share a spool, Config.SpoolShared; a ledger and a copy restored from
// before the claim) are two files: named after the intent and token alone, before 2026-12-06,
// the second outcome kept replaced the first, answered as kept and never recorded
// (TestOutcomesOfTwoLedgersClaimsWithOneTokenAreBothKept).
func spoolName(o Outcome) string {
	if o.Ticket.Nonce == "" {
		return legacySpoolName(o)
	}
	h := sha256.Sum256([]byte(o.Ticket.Nonce))
	return spoolPrefix(o.Ticket.Intent) + strconv.FormatUint(o.Ticket.Token, 10) + "-" + hex.EncodeToString(h[:4]) + ".json"
}

// spoolNames are the names o's file may have in the spool: spoolName, then, for a ticket with a
// nonce, the name an earlier build gave it.
func spoolNames(o Outcome) []string {
	if o.Ticket.Nonce == "" {
		return []string{spoolName(o)}
	}
	return []string{spoolName(o), legacySpoolName(o)}
}

// legacySpoolName is the name an earlier build gave o's file (no nonce in it).
func legacySpoolName(o Outcome) string {
	return spoolPrefix(o.Ticket.Intent) + strconv.FormatUint(o.Ticket.Token, 10) + ".json"
}

func spoolPrefix(intent string) string {
	h := sha256.Sum256([]byte(intent))
	return hex.EncodeToString(h[:8]) + "-"
}

// spooledFor reports whether the spool holds a file of intent (of any ticket), for DrainedFor:
// a spool that cannot be read tells nothing, false (judge asks spoolMayHold instead).
func (e *Engine) spooledFor(intent string) bool {
	if e.cfg.SpoolDir == "" {
		return false
	}
	names, err := spoolEntries(e.cfg.SpoolDir, spoolPrefix(intent))
	return err == nil && len(names) > 0
}

// spoolMayHold says why an outcome of intent may wait in the spool, for judge, or "" when none
// can. A re-run-safe claim whose holder is gone is taken over; but when its outcome waits in
// the spool (the ledger failed when it came, and the holder died before the drain), re-running
// it would run an effect that is known to have run: judge fences it instead, and the drain
// heals it. A spool that cannot be read (another user's, beside a SQLite ledger both use)
// tells nothing, so it may hold one: taken over then, the claim's commit was refused as late
// when the spool's owner drained it, and the effect ran again.
func (e *Engine) spoolMayHold(intent string) string {
	if e.cfg.SpoolDir == "" {
		return ""
	}
	names, err := spoolEntries(e.cfg.SpoolDir, spoolPrefix(intent))
	// A note of a claim given up (beside.go) is no outcome: it says its claim never ran, and
	// that claim, met here, is rightly taken over. Counted, a note waiting for its writer
	// (which may run for long, or out of this host's sight for ever) had every re-run-safe
	// claim of its intent whose holder died fenced as unknown
	// (TestNoteOfAClaimThatDidNotLandDoesNotFenceAReRunSafeClaim).
	names = slices.DeleteFunc(names, isNoteName)
	switch {
	case err != nil:
		return fmt.Sprintf("this host's spool cannot be read to see whether an outcome of the intent waits there (%v)", err)
	case len(names) > 0:
		return "an outcome of the intent waits in this host's spool"
	}
	return ""
}

// spoolEntries lists the outcome files of a spool directory whose names start with prefix, as
// paths, sorted: read from the directory, not matched with filepath.Glob, whose pattern
// would read the directory's own name as one (a ledger under "w[1]/" had a spool no drain
// ever found). A missing directory holds none.
func spoolEntries(dir, prefix string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		if n := de.Name(); strings.HasPrefix(n, prefix) && strings.HasSuffix(n, ".json") && !de.IsDir() {
			names = append(names, filepath.Join(dir, n))
		}
	}
	sort.Strings(names)
	return names, nil
}

func (s *spool) put(dir string, o Outcome) (string, error) {
	if err := durabledir.MkdirAll(dir, 0o700); err != nil { // a new directory's entry synced too
		return "", err
	}
	sp := spooled{Outcome: o, ResultBytes: o.Result}
	if !readable(o.Result) {
		sp.Outcome.Result = nil // not JSON, or too deep to read back in the file: result_bytes alone
	}
	b, err := marshalRaw(sp)
	if err != nil {
		return "", err
	}
	final := filepath.Join(dir, spoolName(o))
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", err
	}
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	// Linked, not renamed, into place: a rename replaces a file there, and another process
	// sharing the spool (a second serve process of the same ledger) may have kept another
	// report of this claim there since this one looked, answered as kept; replaced, it was
	// lost (TestTwoReportsOfOneClaimThroughTwoProcessesAreNotBothKept). Only where the file
	// system has no hard links does a rename put it there.
	err = os.Link(f.Name(), final)
	if err != nil && !errors.Is(err, os.ErrExist) {
		err = os.Rename(f.Name(), final)
	}
	os.Remove(f.Name())
	if errors.Is(err, os.ErrExist) {
		if err := keptAlready(final, o); err != nil {
			return "", err
		}
		// Another process linked the same report there and may not have synced the
		// directory yet (or was cut off before it could): answered as kept, its entry must be
		// durable now, as this one's own would be.
		return final, syncDir(dir)
	}
	if err != nil {
		return "", err
	}
	return final, syncDir(dir)
}

// otherReportError: put found another report of the outcome's claim kept in the spool.
type otherReportError struct{ w Outcome }

func (e otherReportError) Error() string {
	return fmt.Sprintf("this claim's %s waits in the spool to be recorded", e.w.Kind)
}

// keptAlready is put's answer when a file is at o's name already: nil when it holds o itself
// (a report kept once already), otherReportError when it holds another report of o's claim,
// else an error naming it (another claim's with the same intent and token, or no outcome).
func keptAlready(path string, o Outcome) error {
	b, err := readSpoolFile(path)
	if err != nil {
		return err
	}
	w, err := decodeSpooled(b)
	if err != nil {
		return fmt.Errorf("spool file %s is there already and is not an outcome (%v)", path, err)
	}
	switch {
	case !sameClaim(w.Ticket, o.Ticket):
		return fmt.Errorf("spool file %s is there already and holds an outcome of another claim of the intent with the same token", path)
	case !sameReport(w, o):
		return otherReportError{w}
	}
	return nil
}

func (s *spool) remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func (s *spool) drain(ctx context.Context, dir string, apply func(Outcome) error) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	removeStaleTemps(dir, time.Now())
	names, err := spoolEntries(dir, "")
	if err != nil || len(names) == 0 {
		return 0, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return 0, fmt.Errorf("spool %s: %w", dir, err)
	}
	defer unlock()
	n := 0
	var errs []error
	for _, name := range names {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		b, err := readSpoolFile(name)
		if errors.Is(err, os.ErrNotExist) {
			continue // another process drained it
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		o, err := decodeSpooled(b)
		if err != nil && isNoteName(name) {
			// A note torn by a crash (putNote links it before its sync): it only spared a
			// claim that never ran the lease rules, and holds no outcome.
			if err := s.remove(name); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err == nil && o.Ticket.Intent == "" {
			err = errors.New("no ticket")
		}
		if err == nil && !knownKind(o.Kind) {
			err = fmt.Errorf("kind %q: want commit, release, failure, abort, lost or unsent", o.Kind)
		}
		if err != nil {
			// Never deleted: an operator must read it (it may be the only record of an effect).
			errs = append(errs, fmt.Errorf("spool file %s is not an outcome (%v); move it away after reading it", name, err))
			continue
		}
		err = apply(o)
		if err == errNotOurs || err == errNotYet {
			continue // another ledger's (Config.SpoolShared), or a claim that may still land: it waits
		}
		if err == errNoTrace {
			// Refused, it would be deleted: it is the outcome of another ledger file once at
			// this path (moved aside or replaced), or of a copy restored from before the claim.
			errs = append(errs, fmt.Errorf("spool file %s: a %s of claim %d of intent %q, of which this ledger has no record and no event: it is another ledger's (a file once at this path, moved aside or replaced, or restored from an older copy); put that ledger back, or move the file beside it (if this ledger's records of the intent expired since, remove it); nothing was recorded or deleted",
				name, o.Kind, o.Ticket.Token, o.Ticket.Intent))
			continue
		}
		if errors.Is(err, ErrInvalid) {
			// A refusal of the file's content, not the ledger's answer about the outcome.
			errs = append(errs, fmt.Errorf("spool file %s is not an outcome the ledger takes (%v); move it away after reading it", name, err))
			continue
		}
		var coded Coded
		if err != nil && !errors.As(err, &coded) {
			errs = append(errs, fmt.Errorf("spooled %s of intent %q: %w", o.Kind, o.Ticket.Intent, err))
			continue
		}
		if err := s.remove(name); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// readSpoolFile reads the spool file at path, which must be a regular file (or a symbolic
// link to one): a named pipe there (made by hand, or by a tool) was opened to be read, and
// the drain waited for a writer for ever with the spool's lock held, and every Recover and
// open of the ledger with it (TestSpoolFileThatIsAPipeDoesNotHangTheDrain).
func readSpoolFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("spool file %s is not a regular file (%s); move it away after looking at it", path, fi.Mode().Type())
	}
	if fi.Size() > maxSpoolFile {
		// Read whole, it ended the process ("fatal error: out of memory"), and every process
		// opening the ledger after it (TestHugeSpoolFileIsNamedNotRead).
		return nil, fmt.Errorf("spool file %s is %d bytes, more than any outcome a ledger takes (SQLite and PostgreSQL refuse a result over 1 GB); move it away after looking at it", path, fi.Size())
	}
	return os.ReadFile(path)
}

// maxSpoolFile bounds the spool files read. A result a ledger can record is at most 1 GB
// (SQLite's and PostgreSQL's bound on a value), and put writes it twice: as result_bytes
// (base64, 4/3 of it) and readable (at most 6 bytes a byte, \u00XX), under 7.4 GB in all.
const maxSpoolFile = 8 << 30

// staleTemp is how old a spool's temporary file (put's, before its rename) must be before a
// drain removes it: a put writes and syncs it within moments, so one this old was left by a
// process that died half way through a put (its outcome never was in the spool: that process
// had not answered).
const staleTemp = time.Hour

// removeStaleTemps removes the temporary files of dir older than staleTemp. Such a file holds
// an outcome whole, a hash-only claim's result too (docs/privacy.md: the spool keeps it only
// until it is recorded); before 2026-12-04 it stayed for good.
func removeStaleTemps(dir string, now time.Time) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, de := range des {
		if !strings.HasPrefix(de.Name(), ".tmp-") || !de.Type().IsRegular() {
			continue
		}
		if fi, err := de.Info(); err == nil && now.Sub(fi.ModTime()) > staleTemp {
			_ = os.Remove(filepath.Join(dir, de.Name()))
		}
	}
}

func knownKind(k OutcomeKind) bool {
	switch k {
	case OutcomeCommit, OutcomeRelease, OutcomeFailure, OutcomeAbort, OutcomeLost, OutcomeUnsent:
		return true
	}
	return false
}

// SpoolFiles lists the outcomes waiting in a spool directory (for operators and tests).
func SpoolFiles(dir string) ([]string, error) {
	names, err := spoolEntries(dir, "")
	for i, n := range names {
		names[i] = strings.TrimPrefix(n, dir+string(filepath.Separator))
	}
	return names, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
