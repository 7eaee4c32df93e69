package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/mark3labs/mcp-go/mcp"
)

// Tool names.
const (
	ToolPrepare   = "fence_prepare"
	ToolCommit    = "fence_commit"
	ToolAbort     = "fence_abort"
	ToolRelease   = "fence_release"
	ToolHeartbeat = "fence_heartbeat"
	ToolStatus    = "fence_status"
	ToolStats     = "fence_stats"
)

// Tools lists the names of the server's tools in the order they are published.
var Tools = []string{ToolPrepare, ToolCommit, ToolAbort, ToolRelease, ToolHeartbeat, ToolStatus, ToolStats}

const (
	descPrepare = `Ask the fence whether to run a side effect. Call it BEFORE the effect with a stable intent id. ` +
		`Answers {"status":"fresh","ticket":{...}}: run the effect exactly once now, then fence_commit (or fence_release / fence_abort) with this ticket; ` +
		`or {"status":"already_done","cert":{...}}: do NOT run it, the recorded result is cert.result (with "result_in_bytes":true, cert.result_bytes, base64). ` +
		`A tool error means do not run it; its JSON says why (code) and what to do next.`
	descCommit = `Record the result of an effect you ran after a "fresh" fence_prepare. Returns the cert (with its hash) that every duplicate of the intent will receive. ` +
		`Refused with lease_lost if the ticket no longer holds the intent; with stale_read_set (executed: true) if a domain you read moved while the effect ran.`
	descAbort = `Report that the effect's outcome is unknown (it may or may not have happened, e.g. a timeout). ` +
		`The intent becomes failed and is fenced until a human operator checks the real system and clears it.`
	descRelease = `Report that the effect definitely did NOT happen (e.g. the call was rejected before doing anything). ` +
		`The intent is free again and the next fence_prepare of it is fresh. ` +
		`With failed: true, report instead that the effect ran and failed definitely (the service answered an error and changed nothing): the intent is free as well, but every fence_prepare that waited on this attempt (wait_secs) is told it failed (waited_attempt_failed) rather than told to run it.`
	descHeartbeat = `Extend the lease of a running effect by the lease TTL from now; call it before ticket.lease_until while a long effect runs. ` +
		`Returns the ticket with its new lease_until. Refused with lease_lost if the intent was taken over.`
	descStatus = `Read the ledger without changing it: the recorded state of an intent (none, in_flight, done, failed, unknown) and/or a domain's current sequence number, the seq to put in a read_set. ` +
		`An intent is named by intent, or by its ticket alone. ` +
		`Anyone naming an intent sees its state, times and hashes; its tool, args, result, agent and reason only with proof: the intent's ticket, or the same tool and args it was prepared with.`
	descStats = `Counts of what the fence did with attempts: since this server started, and in the ledger over every process that shares it.`
)

// addTools registers the seven tools.
func (s *Server) addTools() error {
	waitBounds := func(sc *jsonschema.Schema) {
		w := sc.Properties["wait_secs"]
		w.Minimum, w.Maximum = ptr(0.0), ptr(float64(MaxWait))
		sc.Properties["keep_result"].Enum = []any{string(fence.KeepFull), string(fence.KeepHash)}
		sc.Properties["redact"].MaxItems = ptr(fence.MaxRedactPaths)
	}
	write := mcp.ToolAnnotation{ReadOnlyHint: ptr(false), DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}
	read := mcp.ToolAnnotation{ReadOnlyHint: ptr(true), OpenWorldHint: ptr(false)}
	adds := []func() error{
		func() error { return addTool(s, ToolPrepare, descPrepare, write, waitBounds, s.prepare) },
		func() error { return addTool(s, ToolCommit, descCommit, write, nil, s.commit) },
		func() error {
			return addTool(s, ToolAbort, descAbort, write, nil, func(ctx context.Context, in EndInput) (any, error) {
				return s.end(ctx, in, true)
			})
		},
		func() error {
			return addTool(s, ToolRelease, descRelease, write, nil, s.release)
		},
		func() error { return addTool(s, ToolHeartbeat, descHeartbeat, write, nil, s.heartbeat) },
		func() error { return addTool(s, ToolStatus, descStatus, read, nil, s.status) },
		func() error { return addTool(s, ToolStats, descStats, read, nil, s.stats) },
	}
	for _, add := range adds {
		if err := add(); err != nil {
			return err
		}
	}
	return nil
}

// addTool registers a tool whose input schema is generated from In. Every call is checked
// against that schema, decoded into In and handed to run; any error becomes a tool error
// carrying a Refusal.
func addTool[In any](s *Server, name, desc string, ann mcp.ToolAnnotation, adjust func(*jsonschema.Schema), run func(context.Context, In) (any, error)) error {
	raw, compiled, err := inputSchema[In](name, adjust)
	if err != nil {
		return err
	}
	ann.Title = name
	tool := mcp.NewTool(name, mcp.WithDescription(desc), mcp.WithRawInputSchema(raw), mcp.WithToolAnnotation(ann))
	tool.InputSchema.Type = "" // the raw schema is the whole schema
	fail := func(intent string, err error) *mcp.CallToolResult {
		switch name {
		case ToolCommit:
			err = ranEffect{err} // whatever refuses it, the effect it reports ran
		case ToolAbort, ToolRelease, ToolHeartbeat:
			err = settling{err, name} // it reports an effect that ran, runs, or did not happen
		}
		return s.refuse(intent, err)
	}
	s.mcp.AddTool(tool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := []byte(req.Params.RawArguments)
		if raw, ok := ctx.Value(rawArgumentsKey{}).(json.RawMessage); ok {
			args = raw
		}
		if len(args) == 0 || string(args) == "null" {
			args = []byte("{}")
		}
		if len(args) > s.opts.MaxArgBytes {
			err := error(fence.InvalidError{Field: "arguments", Why: fmt.Sprintf("are %d bytes; at most %d are accepted (the ledger keeps the args and result of every action)", len(args), s.opts.MaxArgBytes)})
			if name == ToolCommit {
				err = resultTooLong{err}
			}
			return fail("", err), nil
		}
		if err := checkArgs(compiled, args); err != nil {
			return fail("", err), nil
		}
		if err := checkText(args); err != nil {
			return fail("", err), nil
		}
		var in In
		if err := json.Unmarshal(args, &in); err != nil {
			return fail("", fence.InvalidError{Field: "arguments", Why: err.Error()}), nil
		}
		out, err := run(ctx, in)
		if err != nil {
			return fail(intentOf(in), err), nil
		}
		return callResult(out, false), nil
	})
	return nil
}

// resultTooLong is the refusal of a fence_commit longer than MaxArgBytes: its result cannot
// be recorded, and must not be replaced by a shorter one (refusalOf says what to do instead).
// Until 2026-12-07 it was told to "fix the arguments", which for a result means recording one
// the effect did not return (TestServeCommitOverTheBoundIsToldNotToShortenIt).
//
// The bound is not lifted for a commit, though its effect ran: serve answers a commit, and
// every duplicate's fence_prepare, with the cert, whose result is in it twice (readable and
// base64) in a text block and again as structuredContent, about five times the result; the
// TypeScript SDK's stdio client reads at most 10 MiB a message and closes the connection on a
// longer one (serve then exits: its input ended). With commits allowed 16 MiB, a 3 MiB
// result's answer (15 MB) closed it, and so would every duplicate's; 60 MB took serve to
// 2.9 GB.
type resultTooLong struct{ error }

func (e resultTooLong) Unwrap() error { return e.error }

func intentOf(in any) string {
	switch v := in.(type) {
	case PrepareInput:
		return v.Intent
	case CommitInput:
		return v.Ticket.Intent
	case EndInput:
		return v.Ticket.Intent
	case ReleaseInput:
		return v.Ticket.Intent
	case HeartbeatInput:
		return v.Ticket.Intent
	case StatusInput:
		if v.Intent == "" && v.Ticket != nil {
			return v.Ticket.Intent
		}
		return v.Intent
	}
	return ""
}

// cancelledBeforeTicket is the release reason of a claim admitted for a request its agent
// cancelled before the ticket was answered.
const cancelledBeforeTicket = "the agent cancelled the request (notifications/cancelled) before its ticket was answered: nothing ran"

// sessionKey marks the stdio session's context in the contexts of its requests.
type sessionKey struct{}

// cancelledAlone says whether ctx, a request's, was cancelled by its client's
// notifications/cancelled: the request's context is done while its session's is not. The
// session's ends when the client's input ends (or Serve's caller cancels), which cancels every
// request too, though a client that sent its requests and closed its input still reads the
// answers: that is not a cancellation of any one request. Outside Serve (the MCP server on
// another transport) it is false: nothing tells the two apart there.
func cancelledAlone(ctx context.Context) bool {
	session, ok := ctx.Value(sessionKey{}).(context.Context)
	return ok && ctx.Err() != nil && session.Err() == nil
}

// cancelledQueuedKey marks the context of a call its client cancelled while it waited for a
// slot (scheduler.handle). That cancellation stands even if the session has ended by the time
// the slot comes (the client closed its input after cancelling), where cancelledAlone, which
// must tell a cancellation from the session's end, no longer sees it.
type cancelledQueuedKey struct{}

// cancelledWhileQueued says whether ctx is such a call's.
func cancelledWhileQueued(ctx context.Context) bool {
	v, _ := ctx.Value(cancelledQueuedKey{}).(bool)
	return v
}

func (s *Server) prepare(ctx context.Context, in PrepareInput) (any, error) {
	req := fence.Request{
		Intent: in.Intent, Parent: in.Parent, Domain: in.Domain, Tool: in.Tool, Args: json.RawMessage(in.Args),
		ReadSet: in.ReadSet, Agent: in.Agent, Clock: in.Clock,
		Redact: in.Redact, KeepResult: fence.KeepResult(in.KeepResult),
		// An agent may leave args out, send null or send {} for a call without arguments,
		// and a retry need not spell them as the first attempt did (docs/serve.md).
		EmptyArgsAlike: true,
	}
	if cancelledWhileQueued(ctx) || cancelledAlone(ctx) {
		// Cancelled before it ran (while it waited for a free --workers slot, say): the ledger
		// is not asked. Admitting, then releasing, would write twice and, in between, hold the
		// intent against another agent's prepare for a request nobody waits for.
		return nil, fmt.Errorf("preparing %s: %w before it ran (nothing was asked of the ledger)", req.Intent, ctx.Err())
	}
	var (
		adm      fence.Admission
		decision fence.Decision
		err      error
	)
	wait := in.WaitSecs
	if noWait, _ := ctx.Value(noWaitKey{}).(bool); noWait {
		wait = 0 // the wait lane was full (scheduler.run)
	}
	// The ask after DrainedFor is this prepare's again, still a waiter of the claim its wait
	// found (fence.Waited): that claim's failure recorded meanwhile is shared with it.
	var waited fence.Waited
	for drained := false; ; drained = true {
		// Waiting ends with the caller (notifications/cancelled, or the session ending); the
		// ledger's reads and writes do not, so none is cut short by it. They end with
		// prepareBound, past the wait: a PostgreSQL ledger has no busy timeout, and a prepare
		// meeting another transaction's lock on the intent (a process stopped inside one) or a
		// database that stopped answering waited for as long, holding its slot.
		bound := time.Duration(wait*float64(time.Second)) + prepareBound
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
		adm, decision, err = s.prepareBeside(lctx, req, time.Duration(wait*float64(time.Second)), ctx.Done(), &waited)
		if err != nil && lctx.Err() != nil && fence.CodeOf(err) == fence.CodeStore {
			err = fmt.Errorf("the ledger did not answer within %s (another process may hold this intent's record locked, or the database does not answer): not admitted, run nothing and ask again: %w", bound, err)
		}
		cancel()
		// An intent of unknown outcome may be unknown only because its outcome waits in the
		// spool for the next Recover (Engine.DrainedFor records it), or was recorded by
		// another process since this read: the agent is asked to call an operator only if
		// the ledger, asked again once, still says unknown. Only the last answer is counted:
		// before 2026-12-06 the refusal was too, and the one call counted twice
		// (TestServeOutcomeDuringALedgerFailureIsSpooled).
		if drained {
			break
		}
		if again, _ := s.eng.DrainedFor(ctx, err); !again {
			break
		}
	}
	s.eng.Count(decision)
	if err != nil && wait > 0 && errors.Is(err, fence.ErrInFlight) && cancelledAlone(ctx) {
		// The wait ended because its request was cancelled: answered as the cancellation
		// (docs/serve.md), not as the in-flight refusal it waited on.
		return nil, fmt.Errorf("waiting for %s: %w (the intent was still in flight)", req.Intent, ctx.Err())
	}
	if err != nil {
		return nil, err
	}
	if adm.Fresh() && cancelledAlone(ctx) {
		// Admitted for a request its agent cancelled meanwhile: a client drops the answer to a
		// request it cancelled, so nobody would hold this ticket, and the intent would stay in
		// flight, then unknown, fenced until an operator clears it. Nothing ran: the claim is
		// released, and the answer (if anyone reads it) says so, without the ticket.
		if rerr := s.eng.Release(context.WithoutCancel(ctx), *adm.Ticket, cancelledBeforeTicket); rerr != nil {
			return nil, fmt.Errorf("admitting %s for a request cancelled meanwhile, then releasing it: %w", req.Intent, rerr)
		}
		return nil, fmt.Errorf("admitting %s: %w (the claim was released: nothing ran)", req.Intent, ctx.Err())
	}
	if adm.Fresh() {
		if h, ok := ctx.Value(handedKey{}).(*handedTicket); ok {
			h.t = adm.Ticket
		}
		return PrepareResult{Status: StatusFresh, Ticket: adm.Ticket,
			Next: fmt.Sprintf("Run the effect once now, then call %s with this ticket and its result (%s if it definitely did not happen, %s if you cannot tell). Heartbeat before lease_until if it runs long.", ToolCommit, ToolRelease, ToolAbort)}, nil
	}
	out := PrepareResult{Status: StatusAlreadyDone, Cert: adm.Cert, DoneAt: timePtr(adm.RecordedAt),
		Next: "Do NOT run the effect: it already ran. Use cert.result as its result."}
	if adm.Cert != nil && !adm.Cert.ResultReadable() {
		// cert.result is null: an agent told to use it took null for the result. Before
		// 2026-12-07 it was told so (TestServeDuplicateOfAResultOnlyInBytesIsToldWhereItIs).
		out.ResultInBytes = true
		out.Next = "Do NOT run the effect: it already ran. Its result is not valid UTF-8 or nests deeper than 9,936 levels, so cert.result is null and is NOT the result: cert.result_bytes holds the result exactly, base64-encoded."
	}
	if adm.ResultNotKept {
		out.ResultNotKept = true
		out.Next = fmt.Sprintf("Do NOT run the effect: it was done at %s. Its result was not kept (keep_result was hash), so it cannot be given back; cert.result holds only its SHA-256.", adm.RecordedAt.UTC().Format(time.RFC3339))
	}
	return out, nil
}

// prepareStuckWait is how long a fence_prepare's claim may go on past the end of its context
// before the prepare is answered without it (prepareBeside): longer than a store takes to give
// up once the context ended (PostgreSQL's 5 s to ask whether a claim was recorded).
var prepareStuckWait = 10 * time.Second

// prepareReleased is the reason a claim answered without it is released with, if it lands.
const prepareReleased = "the prepare was answered before the ledger confirmed its claim (the ledger did not answer), so nobody holds its ticket: released once the ledger answered"

// prepareBeside is PrepareWaitWith, bounded even where the store cannot stop: a SQLite
// write blocked inside the kernel (the ledger's file system frozen by fsfreeze, as backup and
// snapshot tools do, or a network disk that hangs) ends with its context only once the disk
// answers, and the prepare waited for it, holding its worker (cmd/effectfence
// TestServePrepareOnAFrozenDiskIsAnswered). So it runs beside the request
// (Engine.PrepareWaitBesideWith), which is answered store_error (not admitted: run nothing,
// ask again) prepareStuckWait after ctx ended; a claim that lands all the same once the disk
// answers is released by the engine, since nobody holds its ticket.
func (s *Server) prepareBeside(ctx context.Context, req fence.Request, wait time.Duration, giveUp <-chan struct{}, waited *fence.Waited) (fence.Admission, fence.Decision, error) {
	adm, decision, err := s.eng.PrepareWaitBesideWith(ctx, req, wait, giveUp, prepareStuckWait, prepareReleased, waited)
	if errors.Is(err, fence.ErrClaimStuck) {
		s.opts.Log.Printf("fence_prepare of %q: its claim is still being written %s after the ledger's bound; answered without it, and released if it is recorded", req.Intent, prepareStuckWait)
	}
	return adm, decision, err
}

// prepareBound bounds a fence_prepare's ledger reads and writes (past its wait_secs). It is
// longer than a SQLite ledger's busy timeout (30 s), which ends a wait for another process's
// lock first there, with what holds it; PostgreSQL has no such timeout. A claim written but
// not confirmed by then is released by the engine once the ledger answers (nobody holds its
// ticket).
const prepareBound = 35 * time.Second

// The outcome calls run detached from the caller's cancellation: an agent that hangs up after
// running an effect must not leave its outcome half-recorded. They go through Engine.Settle:
// an outcome the ledger does not take is retried for up to settleWait and then kept in the
// ledger's spool (recorded by the next Recover: every 10 s while serve runs, and when any
// process next opens the ledger), so it survives the agent giving up and this process
// ending. The agent is told it is kept (Refusal.Spooled).

// settleWait bounds how long a settling tool retries an outcome the ledger does not take
// before answering that it waits in the spool.
const settleWait = 2 * time.Second

func (s *Server) settle(ctx context.Context, o fence.Outcome) (*fence.Cert, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleWait)
	defer cancel()
	return s.eng.Settle(sctx, o)
}

func (s *Server) commit(ctx context.Context, in CommitInput) (any, error) {
	cert, err := s.settle(ctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: in.Ticket.Ticket(), Result: []byte(in.Result)})
	if err != nil {
		return nil, err
	}
	// A retried commit of the same ticket gets the recorded cert: say so if its result is not
	// the one this call sent, rather than call it recorded.
	if !cert.SameResult([]byte(in.Result)) {
		return nil, ResultDiffersError{Cert: cert}
	}
	if _, hashOnly := cert.ResultNotKept(); hashOnly {
		return CommitResult{Cert: cert, Next: "Done: the effect is recorded with only its result's SHA-256 (keep_result hash); duplicates of this intent are told it was done, not given the result."}, nil
	}
	return CommitResult{Cert: cert, Next: "Done: the result is recorded; every duplicate of this intent will receive this cert."}, nil
}

// ranEffect is a refusal of a commit (addTool wraps every one): the agent reports an effect
// it ran, so the refusal says executed, whatever it refuses (nothing recorded is not nothing
// run).
type ranEffect struct{ error }

func (e ranEffect) Unwrap() error { return e.error }

// settling is a refusal of fence_abort, fence_release or fence_heartbeat (addTool wraps every
// one): the agent reports an effect it ran, is running, or that did not happen, so an
// invalid_request of it never says that nothing ran.
type settling struct {
	error
	tool string
}

func (e settling) Unwrap() error { return e.error }

func (s *Server) end(ctx context.Context, in EndInput, abort bool) (any, error) {
	if abort {
		if _, err := s.settle(ctx, fence.Outcome{Kind: fence.OutcomeAbort, Ticket: in.Ticket.Ticket(), Reason: in.Reason}); err != nil {
			return nil, err
		}
		// The clear command, as a later prior_failure of the intent names it (before
		// 2026-12-07 this named none: "and clear it").
		next := "The intent is fenced: do not retry it. A human operator must check the real system and run " + s.clearCommand(in.Ticket.Intent, in.Ticket.Token) + "."
		if s.opts.InMemory {
			next = "The intent is fenced: do not retry it. A human operator must check the real system and " + inMemoryAdvice + "."
		}
		return EndResult{Intent: in.Ticket.Intent, State: fence.StateFailed, Next: next}, nil
	}
	if _, err := s.settle(ctx, fence.Outcome{Kind: fence.OutcomeRelease, Ticket: in.Ticket.Ticket(), Reason: in.Reason}); err != nil {
		return nil, err
	}
	return EndResult{Intent: in.Ticket.Intent, State: fence.StateNone,
		Next: "The intent is free: the next fence_prepare of it is fresh."}, nil
}

// failedReason is the reason of a fence_release with failed: true that gives none: the
// waiters it fails are told why from it (fence.FailedWaitError.Reason).
const failedReason = "the agent reported that the effect ran and failed definitely (fence_release with failed: true)"

// release is fence_release. Failed, the claim ends as fence.OutcomeFailure, as wrap ends a call
// its tool answered with an error: the intent is free, and the fence_prepare calls that waited
// on this claim, here or in another process on the ledger, share the failure
// (waited_attempt_failed) rather than run the effect. Before 2026-12-06 fence_release could
// only release, and such a waiter was told to run the effect again
// (TestServeReleaseAsFailedIsSharedWithAWaiter).
func (s *Server) release(ctx context.Context, in ReleaseInput) (any, error) {
	if !in.Failed {
		return s.end(ctx, EndInput{Ticket: in.Ticket, Reason: in.Reason}, false)
	}
	reason := in.Reason
	if reason == "" {
		reason = failedReason
	}
	if _, err := s.settle(ctx, fence.Outcome{Kind: fence.OutcomeFailure, Ticket: in.Ticket.Ticket(), Reason: reason}); err != nil {
		return nil, err
	}
	return EndResult{Intent: in.Ticket.Intent, State: fence.StateNone,
		Next: "The intent is free. The agents that waited on this attempt are told it failed, not to run it; the next fence_prepare of it is fresh, so call it again only if you mean to try the action again."}, nil
}

func (s *Server) heartbeat(ctx context.Context, in HeartbeatInput) (any, error) {
	t := in.Ticket.Ticket()
	t.Reclaimed = in.Ticket.Reclaimed // echoed back, so the renewed ticket reads like the first
	// Bounded like the outcomes: a heartbeat holds a settle slot while it waits for the
	// ledger, and a commit queued behind it must still be answered within settleWait. One
	// the ledger does not take by then extended nothing; the agent calls it again.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleWait)
	defer cancel()
	t, err := s.eng.Heartbeat(hctx, t)
	if err != nil {
		return nil, err
	}
	return HeartbeatResult{Ticket: t, Next: "Keep running the effect; use this ticket from now on."}, nil
}

func (s *Server) status(ctx context.Context, in StatusInput) (any, error) {
	if in.Intent == "" && in.Ticket != nil {
		in.Intent = in.Ticket.Intent // a ticket names its intent: the agent holding it need not repeat it
	}
	if in.Intent == "" && in.Domain == "" {
		return nil, fence.InvalidError{Field: "intent", Why: "name an intent, a domain, or both (a ticket names its intent)"}
	}
	var out StatusResult
	if in.Intent != "" {
		rec, err := s.eng.Status(ctx, in.Intent)
		if err != nil {
			return nil, err
		}
		proven, err := s.provesCall(rec, in)
		if err != nil {
			return nil, err
		}
		out.Intent = statusOf(rec, proven)
	}
	if in.Domain != "" {
		seq, err := s.eng.Current(ctx, in.Domain)
		if err != nil {
			return nil, err
		}
		out.Domain = &DomainStatus{Domain: in.Domain, Seq: seq}
	}
	return out, nil
}

func (s *Server) stats(ctx context.Context, _ StatsInput) (any, error) {
	st, err := s.eng.Stats(ctx)
	if err != nil {
		return nil, err
	}
	return StatsResult{SinceBoot: statsCounts(st.SinceBoot), Ledger: statsCounts(st.Ledger), Line: st.Line()}, nil
}
