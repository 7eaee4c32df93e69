package serve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/mark3labs/mcp-go/mcp"
)

// refuse turns an error into a tool error whose JSON carries the stable code, the facts the
// error knows and what the agent should do next. The clear command of a fenced intent names
// the server's ledger (Options.ClearHint).
func (s *Server) refuse(intent string, err error) *mcp.CallToolResult {
	r := refusalOf(intent, err, s.opts.InMemory)
	var prior fence.PriorFailureError
	errors.As(err, &prior)
	claim := fence.ClaimFlag(prior.Token) // the clear is of the claim that failed (see RefusalOf)
	if s.opts.InMemory && r.Code == fence.CodePriorFailure && r.Intent != "" {
		plain := "run " + fence.CodeSpan(fence.ClearCommandWith(r.Intent, claim))
		r.Message = strings.ReplaceAll(r.Message, plain, inMemoryAdvice)
		r.Next = strings.ReplaceAll(r.Next, plain, inMemoryAdvice)
		return callResult(r, true)
	}
	if s.opts.ClearHint != "" && r.Code == fence.CodePriorFailure && r.Intent != "" {
		plain, named := fence.CodeSpan(fence.ClearCommandWith(r.Intent, claim)), s.clearCommand(r.Intent, prior.Token)
		r.Message = strings.ReplaceAll(r.Message, plain, named)
		r.Next = strings.ReplaceAll(r.Next, plain, named)
	}
	return callResult(r, true)
}

// clearCommand is the operator's clear command of claim token (0: any) of intent, in a
// Markdown code span (fence.CodeSpan), naming this server's ledger (Options.ClearHint) when it
// has a hint. A note in the hint (" (with the password of the URL …)") follows the command,
// out of its span: inside, the command pasted failed in the shell.
func (s *Server) clearCommand(intent string, token uint64) string {
	claim := fence.ClaimFlag(token)
	h := s.opts.ClearHint
	if h == "" {
		return fence.CodeSpan(fence.ClearCommandWith(intent, claim))
	}
	flags, note, hasNote := strings.Cut(h, " (with ")
	named := fence.CodeSpan(fence.ClearCommandWith(intent, claim+" "+flags))
	if hasNote {
		named += " (with " + note
	}
	return named
}

// inMemoryAdvice replaces the clear command in a refusal of a server whose ledger is in its
// memory (Options.InMemory).
const inMemoryAdvice = "restart this serve process: its ledger is in its memory, which no `effectfence ledger` command can reach, and a restart forgets every intent it recorded"

// RefusalOf describes err for an agent. intent is the intent the call was about ("" if none).
func RefusalOf(intent string, err error) Refusal {
	return refusalOf(intent, err, false)
}

// refusalOf is RefusalOf for a server whose ledger is in its memory or not (Options.InMemory:
// no clear command reaches it, and refuse replaces the command with inMemoryAdvice).
func refusalOf(intent string, err error, inMemory bool) Refusal {
	r := Refusal{Code: fence.CodeOf(err), Message: err.Error(), Intent: intent}
	var (
		inFlight fence.InFlightError
		failed   fence.FailedWaitError
		prior    fence.PriorFailureError
		conflict fence.IntentConflictError
		stale    fence.StaleReadSetError
		race     fence.DomainRaceError
		lost     fence.LeaseLostError
		invalid  fence.InvalidError
		differs  ResultDiffersError
		spooled  fence.SpooledError
	)
	switch {
	case errors.As(err, &differs):
		r.Intent = differs.Cert.Intent
		r.State = fence.StateDone
		r.Executed = true
		r.Cert = differs.Cert
		r.Next = "Nothing new was recorded: this intent is already done, and its recorded result (cert.result) is not the result you sent. The first commit stands and every duplicate receives cert.result. If the effect really ran again, that is a second effect: tell a human operator."
		if !differs.Cert.ResultReadable() {
			// cert.result is null there: the recorded result is in result_bytes alone.
			r.ResultInBytes = true
			r.Next = "Nothing new was recorded: this intent is already done, and its recorded result is not the result you sent. The first commit stands and every duplicate receives it: cert.result_bytes (base64; cert.result is null, as the result is not valid UTF-8 or nests deeper than 9,936 levels). If the effect really ran again, that is a second effect: tell a human operator."
		}
	case errors.As(err, &inFlight):
		r.Intent = inFlight.Intent
		r.Holder = ptr(inFlight.Holder)
		r.LeaseUntil = timePtr(inFlight.LeaseUntil)
		r.State = fence.StateInFlight
		r.Next = fmt.Sprintf("Do not run the effect: another attempt is running it. Call %s again later (or with wait_secs) to receive its recorded result.", ToolPrepare)
	case errors.As(err, &failed):
		// The holder (a serve agent's fence_release with failed: true, wrap's, or a library
		// user's) reported its call failed definitely (OutcomeFailure) while this prepare
		// waited on it: the waiter shares the failure.
		r.Intent = failed.Intent
		r.State = fence.StateNone
		r.Next = fmt.Sprintf("Do not run the effect now: the attempt you waited for ran and failed definitely (the message says why), and this call shares that failure. The intent is free: call %s again only if you mean to try the action again.", ToolPrepare)
	case errors.As(err, &prior):
		r.Intent = prior.Intent
		r.State = prior.State
		clear := fence.CodeSpan(fence.ClearCommandWith(prior.Intent, fence.ClaimFlag(prior.Token)))
		r.Next = fmt.Sprintf("Do not run the effect and do not retry: an earlier attempt may have done it. Tell a human operator to check the real system and run %s.", clear)
		if prior.State == fence.StateUnknown && !prior.LeaseUntil.IsZero() {
			// Unknown only because its lease lapsed or its serve process looked gone: the
			// agent holding its ticket may still run the effect and can still report it (a
			// late fence_commit heals the claim, through any serve process), and a retry then
			// receives it. Until 2026-12-07 this said "do not retry" and to run the clear
			// now, which ledger clear refuses while the lease runs or the holder's process
			// does (TestServeRefusalOfAClaimThatCanStillHealSaysSo).
			r.LeaseUntil = timePtr(prior.LeaseUntil)
			held := ""
			if !inMemory {
				held = ": the clear is refused while the process holding the claim still runs on this host"
				if prior.LeaseRuns() { // by the ledger's clock, as the clear judges it
					held += fmt.Sprintf(", and until %s, when the claim's lease lapses", prior.LeaseUntil.UTC().Format(time.RFC3339))
				}
			}
			r.Next = fmt.Sprintf("Do not run the effect: claim %d of this intent may have run it or may still be running it, and the agent holding that claim's ticket can still report its outcome (a late %s records it). Call %s again later: once that outcome is recorded, a retry receives it. If the intent stays unknown, tell a human operator to check the real system and run %s%s.", prior.Token, ToolCommit, ToolPrepare, clear, held)
		}
	case errors.As(err, &conflict):
		r.Intent = conflict.Intent
		r.Next = fmt.Sprintf("Do not run the effect: this intent id is recorded for a different call (tool or args differ), which may already have run. If this call retries that action with changed tool or args, do not run it under a new intent: call %s with the intent to see whether it ran (with the first attempt's tool and args, or its ticket, to get its result). Only an action distinct from the recorded one takes an intent id of its own.", ToolStatus)
	case errors.As(err, &stale):
		r.Intent = stale.Intent
		r.Domain = stale.Domain
		r.Expected, r.Actual = ptr(stale.Expected), ptr(stale.Actual)
		r.Executed = stale.Executed
		if stale.Executed {
			r.State = fence.StateFailed
			r.Next = "The effect already ran on stale state; the intent is now failed and fenced. Do not retry: tell a human operator what happened."
		} else {
			r.Next = fmt.Sprintf("Do not run the effect: the state you decided on moved. Re-read the domain with %s and decide again with a fresh read_set.", ToolStatus)
		}
	case errors.As(err, &race):
		r.Intent = race.Intent
		r.Domain = race.Domain
		r.Expected, r.Actual = ptr(race.Expected), ptr(race.Actual)
		r.Next = fmt.Sprintf("Do not run the effect: another action took the domain in the same instant. Re-read it with %s and decide again.", ToolStatus)
	case errors.As(err, &lost):
		r.Intent = lost.Intent
		// "The intent's record", not "nothing": a late report of a claim the fence issued is
		// kept in the audit trail (fence.LeaseLostError).
		r.Next = fmt.Sprintf("The intent's record was not changed: this ticket does not hold the intent (taken over, cleared, already ended, or not a ticket the fence issued). Call %s to see what happened; do not run the effect again on your own.", ToolStatus)
	case errors.As(err, &invalid):
		r.Field = invalid.Field
		r.Next = "Nothing ran and nothing was recorded. Fix the arguments as the message says and call again."
	case errors.Is(err, context.Canceled):
		// The caller cancelled (a wait_secs wait, or the session ended): the ledger did not
		// fail, but the request may have reached it before the cancellation did.
		r.Next = fmt.Sprintf("This request was cancelled before it was answered (by you or your client); the ledger did not fail. Do not run the effect on this answer: call %s for the intent to see what is recorded, or call %s again.", ToolStatus, ToolPrepare)
	case errors.As(err, &spooled):
		r.Spooled = spooled.Path // a commit's says executed, as every refusal of a commit (ranEffect)
		r.Next = fmt.Sprintf("The ledger failed, but this outcome is kept in the fence's local spool (spooled) and will be recorded when the ledger answers again (within 10 s, or when a fence process next opens the ledger); nothing is lost if you stop now. Do NOT run the effect again. To see it recorded, call %s later (or this tool again with the same ticket and arguments).", ToolStatus)
	default:
		r.Next = "The ledger failed; the call may not be recorded. Retry the same call; if it keeps failing, tell the operator (effectfence ledger check)."
	}
	var settle settling
	if errors.As(err, &settle) && errors.As(err, &invalid) {
		// Until 2026-12-07 this was a refused fence_prepare's "Nothing ran", said to an agent
		// reporting an effect that ran (abort, release as failed) or runs (heartbeat)
		// (TestServeSettlingCallRefusedAsInvalidNeverSaysNothingRan). It said "with the same
		// ticket" to a call that sent none, or whose ticket was what was wrong.
		r.Next = fmt.Sprintf("Nothing was recorded: fix the arguments as the message says and call %s again with your ticket as it was given to you (by fence_prepare, or your last fence_heartbeat). This answer says nothing of the effect itself: do not run the effect again on it.", settle.tool)
	}
	var ran ranEffect
	if errors.As(err, &ran) {
		// A commit: the effect ran, as the agent reports, whether or not it was recorded.
		r.Executed = true
		if errors.As(err, &invalid) {
			r.Next = fmt.Sprintf("Nothing was recorded: the effect you ran is not in the ledger. Fix the arguments as the message says and call %s again with your ticket as it was given to you (by fence_prepare, or your last fence_heartbeat); do not run the effect again.", ToolCommit)
		}
		var long resultTooLong
		if errors.As(err, &long) {
			// Not "fix the arguments": the only fix of a result is one the effect did not
			// return, which every duplicate would then receive as the effect's.
			r.Next = fmt.Sprintf("Nothing was recorded: the result is longer than serve records, so this effect's result cannot be kept, and a shortened or changed result must not be committed in its place (every duplicate would receive it). Do not run the effect again: call %s with your ticket and a reason saying that it ran and how long its result was, so that the intent is fenced for a human operator.", ToolAbort)
		}
		if errors.As(err, &lost) {
			// The effect ran, and this ticket's claim is not the intent's: the result is not
			// its outcome, and if another attempt took the intent over, its effect is a second
			// one. Until 2026-12-07 this said "Nothing was recorded", though the ledger keeps a
			// late result in its audit trail, and nothing of a second effect
			// (TestServeRefusedLateCommitSaysWhatWasKept).
			r.Next = fmt.Sprintf("Your result is not recorded as this intent's outcome: this ticket does not hold the intent (taken over, cleared, already ended, or not a ticket the fence issued), and the intent's record was not changed; the late result of a claim the fence issued is kept in the ledger's audit trail, for an operator. Do not run the effect again. Call %s to see what holds the intent now: if another attempt ran the effect too, that is a second effect: tell a human operator.", ToolStatus)
		}
	}
	return r
}
