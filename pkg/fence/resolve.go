package fence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Resolution is what a person found out about an intent whose outcome is unknown.
type Resolution string

const (
	// Happened: the effect took place. The intent is recorded done with a cert, like a
	// commit, and duplicates are answered with its result instead of running.
	Happened Resolution = "happened"
	// DidNotHappen: the effect did not take place. The intent is freed (like Clear) and the
	// next attempt runs it.
	DidNotHappen Resolution = "did_not_happen"
	// LeaveFenced: nothing is known yet. The intent stays fenced; only the answer is audited.
	LeaveFenced Resolution = "leave_fenced"
)

// ParseResolution accepts happened, did_not_happen (or did-not-happen) and leave_fenced (or
// leave-fenced).
func ParseResolution(s string) (Resolution, error) {
	switch r := Resolution(strings.ReplaceAll(s, "-", "_")); r {
	case Happened, DidNotHappen, LeaveFenced:
		return r, nil
	}
	return "", InvalidError{"resolution", fmt.Sprintf("%q: want happened, did_not_happen or leave_fenced", s)}
}

// Audit event kinds of Resolve, kept forever (see KeptForever) like operator clears.
const (
	EventResolveHappened     = "resolve_happened"
	EventResolveDidNotHappen = "resolve_did_not_happen"
	EventResolveLeaveFenced  = "resolve_leave_fenced"
)

// Event is the kind of the audit event an answer r appends.
func (r Resolution) Event() string { return r.event() }

func (r Resolution) event() string {
	switch r {
	case Happened:
		return EventResolveHappened
	case DidNotHappen:
		return EventResolveDidNotHappen
	}
	return EventResolveLeaveFenced
}

// ResolveRequest is one answer to an intent whose outcome is unknown.
type ResolveRequest struct {
	Intent string
	How    Resolution
	// Result (Happened only) is the JSON value duplicates are answered with. Empty: a tool
	// result saying a person confirmed the effect (ConfirmedResult, with Ref).
	Result json.RawMessage
	// Ref (Happened only) is a reference the person gave (a charge id, a ticket): it is put in
	// the default result and in the audit event.
	Ref string
	// Who answered and Via which channel: "cli", or "elicitation:<client name> <version>".
	// The audit event's Who is WhoVia(Who, Via).
	Who, Via string
	// Reason says what was checked. Required.
	Reason string
	// Token, when not 0, is the fencing token of the claim the answer is about (Record.Token
	// of the record the person was shown): an intent claimed again since (cleared, or resolved
	// as not having happened, and run once more) is refused (NotFencedError) and nothing
	// changes, so an answer about one attempt is never recorded on another.
	Token uint64
}

// Resolved is what Resolve did.
type Resolved struct {
	// Prev is the intent's record before the answer. With an error, it is set only when the
	// answer got as far as its write (its commit failed, or its answer was lost).
	Prev Record
	// Cert is the recorded cert (Happened only).
	Cert *Cert
	// Event is the audit event appended.
	Event Event
}

// CodeNotFenced: a resolve named an intent whose outcome is not unknown (done, in flight).
const CodeNotFenced = "not_fenced"

// ErrNotFenced is matched by NotFencedError.
var ErrNotFenced error = sentinel(CodeNotFenced)

// NotFencedError: Resolve was asked about an intent whose outcome is not unknown; nothing was
// changed.
type NotFencedError struct {
	Intent string
	State  State
	Why    string
	// Reclaimed, when not 0, is the claim that holds the intent now, the request having named
	// another (ResolveRequest.Token, ClearClaim): the claim it was about was cleared or
	// resolved, and the intent claimed again since.
	Reclaimed uint64
}

// otherClaim is the refusal of a request about claim token of an intent that rec, another
// claim, holds now.
func otherClaim(intent string, token uint64, rec *Record) NotFencedError {
	why := fmt.Sprintf("the request is about claim %d, and the intent was claimed again since (claim %d, a new attempt)", token, rec.Token)
	if rec.Token < token { // tokens only grow: token never held the intent in this ledger
		why = fmt.Sprintf("the request is about claim %d, and the intent is held by claim %d, an earlier one: claim %d never held it in this ledger", token, rec.Token, token)
	}
	return NotFencedError{Intent: intent, State: rec.State, Reclaimed: rec.Token, Why: why}
}

func (e NotFencedError) Error() string {
	if e.Reclaimed != 0 {
		return fmt.Sprintf("%s: intent %q is held by another claim than the one named: %s; it is %s now; nothing was changed", CodeNotFenced, e.Intent, e.Why, e.State)
	}
	if e.State == StateUnknown { // its holder may still settle it: see Engine.SilentHolder
		return fmt.Sprintf("%s: intent %q is unknown, but not free for the next attempt: %s; nothing was changed", CodeNotFenced, e.Intent, e.Why)
	}
	return fmt.Sprintf("%s: intent %q is %s, not of unknown outcome: %s; nothing was changed", CodeNotFenced, e.Intent, e.State, e.Why)
}
func (e NotFencedError) Code() string         { return CodeNotFenced }
func (e NotFencedError) Is(target error) bool { return target == ErrNotFenced }

// WhoVia is the audit trail's "who" of an answer given by who through via.
func WhoVia(who, via string) string {
	switch {
	case via == "":
		return who
	case who == "":
		return "via " + via
	}
	return who + " via " + via
}

// MetaResolved is the _meta member of ConfirmedResult.
const MetaResolved = "effectfence/resolved"

// ConfirmedResult is the tool result (MCP CallToolResult) recorded for an intent resolved as
// happened without a result of its own: a text saying a person confirmed the effect, with
// their reference, and the same facts in _meta.
func ConfirmedResult(ref, who string, at time.Time) json.RawMessage {
	text := fmt.Sprintf("effectfence: this call was not run again. A person (%s) confirmed on %s that an earlier identical call took effect.",
		who, at.UTC().Format(time.RFC3339))
	meta := map[string]string{"by": who, "at": at.UTC().Format(time.RFC3339Nano)}
	if ref != "" {
		text += " Reference: " + ref
		meta["reference"] = ref
	}
	out, _ := json.Marshal(map[string]any{
		"content": []map[string]string{{"type": "text", "text": text}},
		"_meta":   map[string]any{MetaResolved: meta},
	})
	return out
}

// Resolve records a person's answer about an intent whose outcome is unknown (state failed or
// unknown, or an in-flight claim that the lease rules now make unknown): Happened records it
// done with a cert (duplicates replay the result), DidNotHappen frees it (the next attempt
// runs), LeaveFenced changes nothing. Every answer appends an audit event kept forever. An
// intent that is done, held in flight or absent is refused (NotFencedError, ErrNotFound) and
// nothing changes; so is DidNotHappen for a claim whose holder process still runs on this host
// past its lease (SilentHolder): it may still run the effect. A late settle by the claim that
// went unknown is refused afterwards and kept in the audit trail (late_result), as after Clear.
func (e *Engine) Resolve(ctx context.Context, r ResolveRequest) (Resolved, error) {
	how, err := ParseResolution(string(r.How))
	if err != nil {
		return Resolved{}, err
	}
	if strings.TrimSpace(r.Reason) == "" {
		return Resolved{}, InvalidError{"reason", "say what was checked in the real system"}
	}
	if how != Happened && (len(r.Result) > 0 || r.Ref != "") {
		return Resolved{}, InvalidError{"result", "a result or reference goes with happened only"}
	}
	if len(r.Result) > 0 {
		if why := resultFault(r.Result); why != "" {
			return Resolved{}, InvalidError{"result", why}
		}
	}
	who := WhoVia(r.Who, r.Via)
	// What the audit event of this answer says, to know a retry of it (SettledBeforeError).
	evWho, evReason := ledgerText(who), r.Reason
	if r.Ref != "" {
		evReason += " (reference: " + r.Ref + ")"
	}
	evReason = ledgerText(evReason)
	// The kinds of earlier event that did what this answer asks: freed the claim, or
	// recorded it done. A note (LeaveFenced) is recorded again.
	var did []string
	switch how {
	case Happened:
		did = []string{EventResolveHappened}
	case DidNotHappen:
		did = []string{EventResolveDidNotHappen, EventClear}
	}
	var out Resolved
	err = e.update(ctx, func(tx Tx) error {
		out = Resolved{}
		rec, err := tx.Get(r.Intent)
		if err != nil {
			return err
		}
		now := tx.Now()
		if rec == nil || (rec.State == StateDone && !rec.ExpiresAt.IsZero() && !now.Before(rec.ExpiresAt)) {
			return settledBefore(tx, r.Intent, r.Token, evWho, evReason, fmt.Errorf("%w: %q", ErrNotFound, r.Intent), did...)
		}
		if r.Token != 0 && rec.Token != r.Token {
			// Another claim holds the intent: refused, even when the trail shows the named
			// claim resolved already (a retry whose answer was lost looks so too). The new
			// attempt is unchecked; "already done" would read as nothing left to do.
			return otherClaim(r.Intent, r.Token, rec)
		}
		if rec.State == StateDone && how == Happened {
			// Recorded done by this very answer, its answer lost? The claim is the record's.
			return settledBefore(tx, r.Intent, rec.Token, evWho, evReason, NotFencedError{Intent: r.Intent, State: StateDone, Why: "its result is recorded and replayed to duplicates"}, did...)
		}
		if why, silent := e.SilentHolder(now, *rec); silent && how == DidNotHappen {
			return NotFencedError{Intent: r.Intent, State: rec.State, Why: why}
		}
		if lw, runs := leaseRuns(now, *rec); runs && how == DidNotHappen && rec.State != StateInFlight {
			return NotFencedError{Intent: r.Intent, State: rec.State, Why: lw}
		}
		switch rec.State {
		case StateFailed, StateUnknown:
		case StateInFlight:
			v, kind, why := e.judge(now, rec)
			if v != fenceIt {
				hint := "its holder is running it; wait for its outcome"
				if v == takeIt {
					hint = "it was declared safe to re-run and its holder is gone: the next attempt runs it"
				}
				return NotFencedError{Intent: r.Intent, State: StateInFlight, Why: hint}
			}
			if lw, runs := leaseRuns(now, *rec); runs && how == DidNotHappen {
				return NotFencedError{Intent: r.Intent, State: StateInFlight, Why: lw}
			}
			if err := e.markUnknown(tx, rec, kind, why); err != nil {
				return err
			}
			if rec, err = tx.Get(r.Intent); err != nil {
				return err
			}
		case StateDone:
			return NotFencedError{Intent: r.Intent, State: StateDone, Why: "its result is recorded and replayed to duplicates"}
		default:
			return fmt.Errorf("fence: intent %q has unknown state %q in the ledger", r.Intent, rec.State)
		}
		out.Prev = *rec
		reason := r.Reason
		switch how {
		case Happened:
			res := r.Result
			if len(res) == 0 {
				res = ConfirmedResult(r.Ref, who, now)
			} else {
				res = append(json.RawMessage(nil), res...)
			}
			if r.Ref != "" {
				reason += " (reference: " + r.Ref + ")"
			}
			done, err := e.doneRecord(rec, res, now)
			if err != nil {
				return err
			}
			// Not the claim's any more: its own late settle is refused and audited.
			done.Nonce = ""
			if err := tx.Put(done); err != nil {
				return err
			}
			answer := *done.Cert
			out.Cert = &answer
			reason += "; recorded done with cert " + done.Cert.Hash
		case DidNotHappen:
			if err := tx.Delete(r.Intent); err != nil {
				return err
			}
		}
		out.Event = Event{At: now, Intent: r.Intent, Kind: how.event(), Who: ledgerText(who), Reason: ledgerText(reason), State: rec.State, Token: rec.Token}
		return tx.AppendEvent(out.Event)
	})
	if err != nil {
		// Prev is kept when the answer got as far as its write: a commit whose answer was
		// lost names the claim, which a retry should name (ResolveRequest.Token).
		return Resolved{Prev: out.Prev}, err
	}
	e.watch.wake(r.Intent)
	return out, nil
}

// SettledBeforeError answers a clear or resolve whose work the audit trail shows done already:
// the claim it is about (its token; with none, the claim the intent's last clear or resolve
// ended) was cleared or resolved so by Event, an earlier request. It is the answer to the retry
// of a clear or resolve whose answer was lost (its connection cut after the COMMIT was sent, or
// its process killed after the commit): before, the retry was told the ledger holds no such
// intent (or, resolved as happened, that it is done), which reads as "your clear did
// nothing", though it had landed. Mine says the earlier request was made by the same person
// with the same reason (the retry's own earlier attempt). It is never the answer when another
// claim holds the intent now: that new attempt is unchecked, and a request about an earlier
// one is refused (a NotFencedError naming both). Nothing was changed. It unwraps to the
// answer given before (ErrNotFound, a NotFencedError), so callers that test for those still
// see them.
type SettledBeforeError struct {
	Intent string
	Event  Event
	Mine   bool
	under  error
}

// Done says what the earlier request did: "cleared", "resolved as happened" or "resolved as
// did not happen".
func (e SettledBeforeError) Done() string {
	switch e.Event.Kind {
	case EventResolveHappened:
		return "resolved as happened"
	case EventResolveDidNotHappen:
		return "resolved as did not happen"
	}
	return "cleared"
}

func (e SettledBeforeError) Error() string {
	by := "an earlier request"
	if e.Mine {
		by = "your earlier attempt"
	}
	return fmt.Sprintf("intent %q: claim %d was %s already, by %s (%s, by %s at %s: %s); nothing was changed",
		e.Intent, e.Event.Token, e.Done(), by, e.Event.Kind, e.Event.Who, e.Event.At.UTC().Format(time.RFC3339Nano), e.Event.Reason)
}
func (e SettledBeforeError) Unwrap() error { return e.under }

// settledBefore returns under, or a SettledBeforeError wrapping it when intent's audit trail
// shows that claim token (0: the claim the intent's last clear or resolve ended, when that
// event was made by who with reason) was already ended by an event of one of kinds. A trail
// that cannot be read leaves under as it is: nothing is changed either way.
func settledBefore(tx Tx, intent string, token uint64, who, reason string, under error, kinds ...string) error {
	mine := func(ev Event) bool {
		return ev.Who == who && (ev.Reason == reason || strings.HasPrefix(ev.Reason, reason+"; recorded done with cert "))
	}
	var (
		found Event
		ok    bool
	)
	err := tx.Events(intent, func(ev Event) bool {
		switch ev.Kind {
		case EventClear, EventResolveHappened, EventResolveDidNotHappen:
		default:
			return true
		}
		if token == 0 || ev.Token == token {
			found, ok = ev, true
		}
		return true
	})
	if err != nil || !ok || !slices.Contains(kinds, found.Kind) || (token == 0 && !mine(found)) {
		return under
	}
	return SettledBeforeError{Intent: intent, Event: found, Mine: mine(found), under: under}
}
