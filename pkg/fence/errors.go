package fence

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Stable machine-readable codes, used on the wire by every front end.
const (
	CodeInFlight     = "intent_in_flight"
	CodePriorFailure = "prior_failure"
	CodeConflict     = "intent_conflict"
	CodeStale        = "stale_read_set"
	CodeDomainRace   = "domain_race"
	CodeLeaseLost    = "lease_lost"
	CodeInvalid      = "invalid_request"
	CodeStore        = "store_error"
	CodeFailedWait   = "waited_attempt_failed"
)

type sentinel string

func (s sentinel) Error() string { return string(s) }
func (s sentinel) Code() string  { return string(s) }

// Sentinels for errors.Is. Each typed error below matches exactly one of them.
var (
	ErrInFlight     error = sentinel(CodeInFlight)
	ErrPriorFailure error = sentinel(CodePriorFailure)
	ErrConflict     error = sentinel(CodeConflict)
	ErrStaleReadSet error = sentinel(CodeStale)
	ErrDomainRace   error = sentinel(CodeDomainRace)
	ErrLeaseLost    error = sentinel(CodeLeaseLost)
	ErrInvalid      error = sentinel(CodeInvalid)
	ErrFailedWait   error = sentinel(CodeFailedWait)
)

// Coded is implemented by every error the engine returns on purpose.
type Coded interface {
	error
	Code() string
}

// CodeOf returns the stable code of err, CodeStore for an error of the store or its
// environment, and "" for nil.
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	var c Coded
	if errors.As(err, &c) {
		return c.Code()
	}
	return CodeStore
}

// InFlightError: another attempt holds a live claim on the intent. Do not run the effect; wait
// and ask again (a retry after the holder finishes receives its recorded result).
type InFlightError struct {
	Intent     string
	Holder     string // agent of the holding attempt
	LeaseUntil time.Time
	// Owner is the holding process (Record.Owner): a front end tells by it (GoneHolderCarrier)
	// a holder that will record the outcome from one that is gone while what it started runs.
	Owner string
	// RerunSafe is the claim's (Record.RerunSafe): once its gone holder's carrier ends, the
	// next attempt takes it over and runs the call again rather than fence it.
	RerunSafe bool
	// Token is the holding claim's fencing token (Record.Token): PrepareWait tells by it
	// whether the attempt it waited on failed (FailedWaitError).
	Token uint64
}

func (e InFlightError) Error() string {
	return fmt.Sprintf("%s: intent %q is being executed by another attempt (agent %q, lease until %s); do not run it, retry later to receive its result",
		CodeInFlight, e.Intent, e.Holder, e.LeaseUntil.UTC().Format(time.RFC3339Nano))
}
func (e InFlightError) Code() string         { return CodeInFlight }
func (e InFlightError) Is(target error) bool { return target == ErrInFlight }

// FailedWaitError: PrepareWait waited for an attempt of the intent held by another process,
// and that attempt failed definitely (its holder reported OutcomeFailure: the tool answered
// an error, so nothing took effect). The waiter shares that failure, as a waiter in the
// holder's own process does (SPEC §6): it is NOT run. The intent is free: a retry runs it.
type FailedWaitError struct {
	Intent string
	// Token is the failed attempt's claim; Reason what its holder reported.
	Token  uint64
	Reason string
}

func (e FailedWaitError) Error() string {
	return fmt.Sprintf("%s: the attempt of intent %q this call waited for failed definitely (%s); this call was NOT executed a second time; the intent is free, so a retry runs it",
		CodeFailedWait, e.Intent, e.Reason)
}
func (e FailedWaitError) Code() string         { return CodeFailedWait }
func (e FailedWaitError) Is(target error) bool { return target == ErrFailedWait }

// PriorFailureError: an earlier attempt of this intent failed or vanished with an unknown
// outcome. The effect may have happened; the intent is fenced until an operator clears it.
type PriorFailureError struct {
	Intent string
	State  State
	Reason string
	// Healable: the intent is unknown only because its holder's lease lapsed (or the holder
	// could not be seen), and that holder may still report the real outcome (see
	// docs/RELIABILITY.md): a retry after that heal replays it. PrepareWait does not wait for
	// it, since a wait never outlives the lease it waits on.
	Healable bool
	// LeaseUntil is the lease of the claim that went unknown, when the claim can still heal
	// (Record.Healable); zero otherwise. Until it lapses an operator's clear without --force
	// and a resolve as did-not-happen are refused (ClearUnlessHeld).
	LeaseUntil time.Time
	// Token is the fencing token of the claim that failed or went unknown (Record.Token), 0
	// when not known. The clear command the message names carries it (ClaimFlag): pasted after
	// the intent was cleared and claimed again, it is refused rather than clear the new
	// attempt, whose effect nobody has checked.
	Token uint64
	// Now is the ledger's clock when the intent was found fenced (Tx.Now: on PostgreSQL the
	// database's, which LeaseUntil was set by and which clear and resolve judge it by); zero
	// when not known. Say whether the lease still runs by this clock, not the host's.
	Now time.Time
}

// LeaseRuns reports whether the claim's lease (LeaseUntil) still ran when the intent was
// found fenced, by the ledger's clock (Now; this host's when that is not known).
func (e PriorFailureError) LeaseRuns() bool {
	now := e.Now
	if now.IsZero() {
		now = time.Now()
	}
	return now.Before(e.LeaseUntil)
}

func (e PriorFailureError) Error() string {
	return fmt.Sprintf("%s: intent %q is %s (%s): the effect may have happened, so it is fenced; an operator must check the real system and run %s before it can run again",
		CodePriorFailure, e.Intent, e.State, e.Reason, CodeSpan(ClearCommandWith(e.Intent, ClaimFlag(e.Token))))
}

// CodeSpan puts s in a Markdown code span (CommonMark) whose content, rendered, is s: fenced by
// one backquote more than the longest run of them in s, and padded with a space inside each
// fence when s begins or ends with one (or with a space: the renderer strips one from each end
// when both are there). A command in single backquotes was cut at the first backquote of an
// intent in it (the agent's text: "pay`x" ends the span after "pay"), and what a client rendered
// as the command was not the one to paste (TestRefusalCommandSpansHoldHostileIntents).
func CodeSpan(s string) string {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if s != "" && (s[0] == '`' || s[len(s)-1] == '`' || s[0] == ' ' && s[len(s)-1] == ' ' && strings.Trim(s, " ") != "") {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}

// ClaimFlag is the flag (" --claim N", with its leading space) that binds an operator's
// command (`effectfence ledger clear`, `ledger resolve`) to the claim whose fencing token is
// token, so that, run after the intent was cleared and claimed again, it is refused instead of
// acting on the new attempt (ClearClaim, ResolveRequest.Token); "" for token 0 (not known).
func ClaimFlag(token uint64) string {
	if token == 0 || token == PendingToken {
		return ""
	}
	return " --claim " + strconv.FormatUint(token, 10)
}

// ClearCommand is the command line that clears intent: `effectfence ledger clear INTENT
// --reason ...`, the intent quoted for a POSIX shell. An intent is the agent's text and may
// begin with '-': it then goes last, after "--", where the command reads no flags (before
// 2026-12-06 such a command, pasted, read the intent as a flag and failed as usage).
func ClearCommand(intent string) string { return ClearCommandWith(intent, "") }

// ClearCommandWith is ClearCommand with more flags (each after a space: " --ledger PATH")
// among its own, before the "--" an intent beginning with '-' follows.
func ClearCommandWith(intent, flags string) string {
	if strings.HasPrefix(intent, "-") {
		return "effectfence ledger clear --reason ..." + flags + " -- " + shellQuote(intent)
	}
	return "effectfence ledger clear " + shellQuote(intent) + " --reason ..." + flags
}
func (e PriorFailureError) Code() string         { return CodePriorFailure }
func (e PriorFailureError) Is(target error) bool { return target == ErrPriorFailure }

// IntentConflictError: the intent is recorded with different tool or arguments. It is refused
// and never handed the other action's receipt. A distinct action takes a distinct intent; but
// the attempt may be a retry whose arguments changed, and the recorded call may have run, so
// the message never advises a new intent without saying so.
// Its message names only the attempt's own fingerprint: the recorded one (an unsalted SHA-256
// of the other call, whose redacted values it lets anyone test guesses of) is for whoever
// holds the error, not for the caller that named the intent.
type IntentConflictError struct {
	Intent              string
	Recorded, Presented string // fingerprints
}

func (e IntentConflictError) Error() string {
	return fmt.Sprintf("%s: intent %q is recorded for a different call (this attempt's fingerprint %s); not executed and no receipt given. The recorded call may already have taken effect: a retry of it whose arguments changed must not be run under another intent; only a distinct action takes an intent of its own",
		CodeConflict, e.Intent, short(e.Presented))
}
func (e IntentConflictError) Code() string         { return CodeConflict }
func (e IntentConflictError) Is(target error) bool { return target == ErrConflict }

// StaleReadSetError: a domain in the read set moved since the caller read it. At prepare the
// effect must not run; re-read the domain and decide again. At commit (Executed is true) the
// effect already ran on stale state and the intent is now failed.
type StaleReadSetError struct {
	Intent   string
	Domain   string
	Expected uint64
	Actual   uint64
	Executed bool
}

func (e StaleReadSetError) Error() string {
	if e.Executed {
		return fmt.Sprintf("%s: domain %q moved from %d to %d while intent %q ran; the effect ran on stale state, the intent is now failed and fenced until an operator clears it",
			CodeStale, e.Domain, e.Expected, e.Actual, e.Intent)
	}
	return fmt.Sprintf("%s: domain %q is at %d, the decision read %d; nothing ran: re-read and decide again",
		CodeStale, e.Domain, e.Actual, e.Expected)
}
func (e StaleReadSetError) Code() string         { return CodeStale }
func (e StaleReadSetError) Is(target error) bool { return target == ErrStaleReadSet }

// DomainRaceError: the target domain was current when the attempt arrived but another
// attempt took its next sequence number in the same instant. Nothing ran. Where the store
// cannot tell the instant of arrival from the instant of decision (SQLite, whose writers
// queue, decides a first attempt in one pass), such a loser is a StaleReadSetError instead:
// handle both alike (re-read and decide again).
type DomainRaceError struct {
	Intent   string
	Domain   string
	Expected uint64
	Actual   uint64
}

func (e DomainRaceError) Error() string {
	return fmt.Sprintf("%s: another attempt took domain %q (now %d, read %d) in the same instant; nothing ran: re-read and decide again",
		CodeDomainRace, e.Domain, e.Actual, e.Expected)
}
func (e DomainRaceError) Code() string         { return CodeDomainRace }
func (e DomainRaceError) Is(target error) bool { return target == ErrDomainRace }

// LeaseLostError: the ticket no longer holds the intent (its lease was taken over, it was
// cleared, or the ticket was never valid). The intent's record was not changed; a refused
// commit, abort or release of a ticket with a token and a nonce is kept in the audit trail as
// a late result (its text said "nothing was recorded" until 2026-12-06, which a holder could
// read as its result lost). The ledger cannot tell a claim it made and has since forgotten
// from a ticket it never issued (docs/DECISIONS.md, "A late result is kept whatever its
// ticket names"), so the ticket of a forged report is kept alike.
//
// A retried report whose first attempt's answer was lost may have been recorded before the
// record changed (another process cleared it): Landed says it was, MayHaveLanded that the
// ledger cannot tell (EarlierAttempt; for a retried commit, the audit trail too:
// earlierCommit). Until 2026-12-07 such a refusal said "the intent's record is unchanged" of
// an outcome that had been recorded (TestCommitLostAndClearedElsewhereSaysItLanded), also when
// the process retrying was another than the one that sent it
// (TestRetriedCommitAfterAClearSaysWhetherItLanded).
type LeaseLostError struct {
	Intent        string
	Token         uint64
	Why           string
	Landed        bool
	MayHaveLanded bool
}

func (e LeaseLostError) Error() string {
	var after string
	switch {
	case e.Landed:
		after = "an earlier attempt of this report, whose answer was lost, was recorded before the record changed; this retry changed nothing"
	case e.MayHaveLanded:
		after = "an earlier attempt of this report, whose answer was lost, may have been recorded before the record changed (the ledger cannot tell); this retry changed nothing"
	default:
		after = "the intent's record is unchanged"
	}
	return fmt.Sprintf("%s: ticket %d no longer holds intent %q (%s); %s", CodeLeaseLost, e.Token, e.Intent, e.Why, after)
}
func (e LeaseLostError) Code() string         { return CodeLeaseLost }
func (e LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// InvalidError: the request itself is malformed. Nothing ran and nothing was recorded.
type InvalidError struct {
	Field string
	Why   string
}

func (e InvalidError) Error() string {
	return fmt.Sprintf("%s: %s: %s", CodeInvalid, e.Field, e.Why)
}
func (e InvalidError) Code() string         { return CodeInvalid }
func (e InvalidError) Is(target error) bool { return target == ErrInvalid }

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r == ':' || r == '.' || r == '/' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
