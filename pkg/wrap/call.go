package wrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/internal/mcpheader"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Keys wrap adds to the _meta of results it did not forward itself.
const (
	MetaReplayed = "effectfence/replayed"
	MetaIntent   = "effectfence/intent"
	MetaCert     = "effectfence/cert"
	MetaCode     = "effectfence/code"
)

// fenced decides whether calls of a tool go through the fence.
func (p *Proxy) fenced(name string, info toolInfo) bool {
	s := p.settings(name)
	switch {
	case s.Pass:
		return false
	case s.Fence, p.opt.FenceReads:
		return true
	}
	if info.readOnly {
		given := s.Given
		if p.opt.PerTool == nil {
			given = GivenFlags(p.opt, name)
		}
		// A tool's wait has an effect here too: it bounds how long its calls wait for the
		// server's tool listing (toolInfo), which a read-only tool's calls need to be known
		// as such. Before 2026-12-07 the log named it among the settings without effect.
		given = slices.DeleteFunc(slices.Clone(given), func(g string) bool { return g == "wait" })
		if len(given) > 0 && p.unapplied.first(name) {
			p.logf("tool %q is annotated readOnlyHint and is not fenced, so its calls pass through and its %s have no effect; fence it (fence: true, --fence %s) if they should apply",
				name, strings.Join(given, ", "), name)
		}
	}
	return !info.readOnly
}

// toolsCall handles tools/call: pass-through for unfenced tools, the fence for the rest. The
// params are decoded strictly (see decodeCall) and what reaches the child is exactly the
// params received, with at most an injected idempotency key spliced into the arguments.
func (p *Proxy) toolsCall(ctx context.Context, m *jsonrpc.Message) []byte {
	if p.opt.Observe == nil {
		return p.toolsCallAs(ctx, m, &CallEvent{})
	}
	ev := CallEvent{}
	start := time.Now()
	out := p.toolsCallAs(ctx, m, &ev)
	ev.Elapsed = time.Since(start)
	p.opt.Observe(ev)
	return out
}

func (p *Proxy) toolsCallAs(ctx context.Context, m *jsonrpc.Message, ev *CallEvent) []byte {
	if string(m.ID) == "null" {
		// MCP: a request's id is a string or a number, never null (JSON-RPC's null is the id of
		// an answer to a request whose id was not known). MCP's SDKs do not run such a request
		// (the TypeScript SDK drops the line, mcp-go takes it for a notification), and its
		// answer, under id null, names no call of the agent's: two such calls could not be told
		// apart, nor one from a refusal of an unreadable line.
		ev.Outcome = "invalid"
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidRequest, "effectfence wrap: a tools/call's id must be a string or a number, not null (MCP); the call was NOT executed: send it with an id"))
	}
	c, err := decodeCall(m.Params)
	if err != nil {
		ev.Outcome = "invalid"
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidParams, "effectfence wrap: tools/call params refused (%v); the call was NOT executed", err))
	}
	ev.Tool = c.name
	s := p.settings(c.name)
	info, life, unlisted := p.toolInfo(ctx, c.name, s.Wait)
	if unlisted != nil {
		ev.Outcome, ev.Code = "refused", CodeToolsUnknown
		if ctx.Err() != nil {
			return nil // cancelled by the agent before it was sent: MCP says no response is sent
		}
		if s.Pass {
			return jsonrpc.Response(m.ID, toolsUnknown(unlisted, c.name))
		}
		// Without the listing the call is fenced, and only asks the ledger: a duplicate of a
		// recorded call needs no listing and is replayed (or waits for the attempt in flight,
		// or is told of its unknown outcome, as any duplicate); a call the ledger admits is
		// released, NOT sent, and refused tools_unknown (unlistedKey). Before 2026-12-07 every
		// call was refused tools_unknown, a duplicate of a call done and recorded too
		// (TestDuplicateIsReplayedWhenTheNewLifesListingFails).
		ctx = context.WithValue(ctx, unlistedKey{}, unlisted)
		info = toolInfo{}
	} else if !p.fenced(c.name, info) {
		ev.Outcome = "passed"
		return p.forwardTo(ctx, life, m, c.name)
	}
	// Options' own per-tool settings were checked by New; PerTool's are known only now (its
	// privacy settings the engine checks). Its ReplayWindow is checked as given: settings
	// fills in Options.ReplayWindow (checked by New) only for 0 or less.
	if p.opt.PerTool != nil {
		if err := s.checkCall(); err != nil {
			ev.Outcome = "invalid"
			return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInternalError, "effectfence wrap: the settings of tool %q are refused (%v); the call was NOT executed", c.name, err))
		}
	}
	id, err := identifyCanon(p.opt.Scope, c.name, c.args, c.canonArgs, s.Ignore, s.Key)
	if err != nil {
		ev.Outcome = "invalid"
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidParams, "effectfence wrap: the arguments cannot be fenced (%v); the call was NOT executed", err))
	}
	// A member a redacted path names but for case would be kept in clear, while a server
	// matching names without regard to case (encoding/json) reads it as the field.
	if err := fieldSpelledOtherwise(c.canonArgs, s.Redact, true, "redacted field"); err != nil {
		ev.Outcome = "invalid"
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidParams, "effectfence wrap: the arguments cannot be fenced (%v); the call was NOT executed", err))
	}
	// The identity covers every argument, the repeat argument included; the server receives
	// the arguments without it (unless its schema declares it) and with the key injected.
	fwd, edited := c.args, false
	if !info.repeatProp {
		fwd, edited = removeMember(fwd, RepeatArg)
	}
	if info.keyProp != "" && !p.opt.NoInjectKey {
		if err := fieldSpelledOtherwise(c.canonArgs, []string{info.keyProp}, false, "idempotency key property"); err != nil {
			// The key would go in beside it, and a server matching names without regard to
			// case (encoding/json) would read the agent's member instead.
			ev.Outcome = "invalid"
			return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidParams, "effectfence wrap: the arguments cannot be fenced (%v); the call was NOT executed", err))
		}
		var ok bool
		if fwd, ok = injectKey(fwd, info.keyProp, info.keyForm.key(id.hash)); ok {
			edited = true
		}
	}
	params := m.Params
	if edited {
		params = c.withArguments(fwd)
	}
	id.exact = fwd
	if c.task {
		// What its wait learns is kept for the follower that may follow the attempt it
		// waited for (followFlight), so that attempt's failure is shared with it, not run.
		ctx = context.WithValue(ctx, waitedKey{}, new(fence.Waited))
	}
	a := p.fencedCall(ctx, c.name, id, params, c.task && unlisted == nil)
	ev.Outcome, ev.Code = a.outcome, a.code
	if a.withdrawn || a.code == "not_sent" && ctx.Err() != nil {
		return nil // cancelled by the agent before it was sent: MCP says no response is sent
	}
	if a.follow {
		return jsonrpc.Response(m.ID, p.followFlight(ctx, m.Params, c.name, id, params, a))
	}
	if c.task && a.err == nil && a.outcome != "executed" && a.code != codeInputRequired {
		// Answered here without running: the agent asked for a task, it gets a terminal one.
		// Not for the question of a first round it waited on (SEP-2322), which is handed on
		// as the server answered it: a question is no outcome, and a completed task is one
		// (before 2026-12-07 the client read a completed task with the question for its
		// result, a call done with no content though nothing had run:
		// TestTaskAugmentedDuplicateOfAFirstRoundGetsTheQuestion). It reaches only a client
		// of MCP 2026-07-28 or later (fencedCall), which has no task-augmented tools/call: its
		// server answers such a call as any, with the question.
		return jsonrpc.Response(m.ID, p.asTask(m.Params, a.result, a.outcome == "replayed"))
	}
	if a.err != nil {
		return jsonrpc.ErrorResponse(m.ID, a.err)
	}
	return jsonrpc.Response(m.ID, a.result)
}

// answer is what the agent receives for one tools/call: a result or a JSON-RPC error.
type answer struct {
	result json.RawMessage
	err    *jsonrpc.Error
	// outcome and code classify it for Options.Observe (see CallEvent).
	outcome, code string
	// withdrawn: the agent cancelled the call while it waited and nothing ran for it, so it
	// gets no response (MCP).
	withdrawn bool
	// follow: a task-augmented call still in flight past its wait, whose agent gets a working
	// task of wrap's own that follows the attempt (followFlight); decision is the ledger's
	// answer, not counted yet (the follower counts its last answer alone).
	follow   bool
	decision fence.Decision
}

func (a answer) as(outcome, code string) answer {
	a.outcome, a.code = outcome, code
	return a
}

// CodeToolsUnknown marks (in _meta) a call refused because the server's tool list could not
// be read: nothing ran, and a retry may run it.
const CodeToolsUnknown = "tools_unknown"

// unlistedKey carries why the server's tools could not be listed for a call that goes through
// the fence only to ask the ledger (toolsCallAs): a claim it is admitted is released, unsent.
type unlistedKey struct{}

// toolsUnknown is the result of a call refused because the server's tool list could not be
// read (why).
func toolsUnknown(why error, tool string) json.RawMessage {
	return toolError(fmt.Sprintf("the MCP server's tool list could not be read (%v), so it is unknown whether %q is read-only or takes an idempotency key. The call was NOT sent and did not run; retry it.", why, tool), CodeToolsUnknown, "")
}

// toolInfo returns what is known of a tool, from the listing of the server's live session,
// and that session: a call judged by it goes to it (a tool passed through unfenced is sent to
// the life whose listing judged it, never to a later one). When the live session has not been
// listed (the agent never listed, or the child was restarted, or the upstream session is new)
// its tools are listed first, starting the server if none is live (listLive); an agent whose
// view of the tools came from a previous life is told notifications/tools/list_changed when
// that listing is not known to be the same. A tool missing from a listing is fenced (the safe
// side) and the child answers for it. Without any listing of the live session nothing is
// known (is it read-only? does it take an idempotency key?), so it is an error and the call
// is not sent.
//
// bound is how long the call waits for a listing: its tool's wait (ToolSettings.Wait, the
// policy's per-tool wait, else --wait). A refresh after list_changed that has not ended
// within it, or a listing of the live session that has not, is an error naming the bound: the
// listing of before a change the server announced no longer judges a call, and the listing
// goes on for the calls after. Before 2026-12-07 a listing held by a stopped server
// (SIGSTOP) held every call up to --wait, whatever its tool's wait, and a call after
// list_changed was then judged by the listing of before the change
// (TestStoppedRefreshAfterListChangedHoldsACallOnlyItsWait,
// TestStoppedListingOfARestartedServerHoldsACallOnlyItsWait).
func (p *Proxy) toolInfo(ctx context.Context, name string, bound time.Duration) (toolInfo, Conn, error) {
	if !p.tools.settledWithin(ctx, bound) { // a refresh after list_changed is under way: judge by its listing
		if err := ctx.Err(); err != nil {
			return toolInfo{}, nil, err
		}
		return toolInfo{}, nil, fmt.Errorf("the MCP server said its tools changed (notifications/tools/list_changed) and did not answer wrap's tools/list within %s, this tool's wait", bound)
	}
	if s := p.live(); s != nil {
		if info, ok, loaded := p.tools.getOf(name, s); ok || loaded {
			return info, s, nil
		}
	}
	r := p.tools.listLive(p.listLive)
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-r.done:
	case <-ctx.Done():
		return toolInfo{}, nil, ctx.Err()
	case <-timer.C:
		return toolInfo{}, nil, fmt.Errorf("the MCP server's tools were not listed within %s, this tool's wait (the server did not start, or did not answer tools/list)", bound)
	}
	if r.err != nil {
		return toolInfo{}, nil, r.err
	}
	info, _, loaded := p.tools.getOf(name, r.s)
	if !loaded {
		return toolInfo{}, nil, errors.New("the MCP server's session ended as its tools were listed")
	}
	return info, r.s, nil
}

// listLive lists the tools of the live session, starting the server if none is live, within
// --wait: three tries (a server that died as it was listed is started again). ctx is the
// cache's (listLive), never a call's: a (re)start cut short by one call's cancellation or
// bound would fail every call for RestartBackoff.
func (p *Proxy) listLive(ctx context.Context) (Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opt.Wait)
	defer cancel()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var s Conn
		if s, err = p.session(ctx); err == nil {
			var differs bool
			if differs, err = p.tools.listFor(ctx, s); err == nil {
				if differs {
					p.logf("the MCP server's new session lists its tools otherwise than the one before: calls are judged by the new listing, and the agent is told (notifications/tools/list_changed)")
					p.reply(jsonrpc.Notification("notifications/tools/list_changed", nil))
				}
				return s, nil
			}
		}
		p.logf("listing tools: %v", err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, err
}

// ParamHeaders returns the arguments of the server's tool name that HTTP clients mirror into
// Mcp-Param-* headers (SEP-2243), as its inputSchema declares them, listing the server's tools
// first if nobody has (see toolInfo). A tool missing from the listing declares none. An error
// means nothing is known of the server's tools.
func (p *Proxy) ParamHeaders(ctx context.Context, name string) ([]mcpheader.Param, error) {
	info, _, err := p.toolInfo(ctx, name, p.opt.Wait)
	if err != nil {
		return nil, err
	}
	return info.params, nil
}

// flight is one intent attempted in this process: the callers waiting in PrepareWait
// (members) and the one running it (the holder). When the attempt fails definitely, the
// holder hands its answer to the members before releasing the intent, so they receive the
// same failure instead of running the call again.
type flight struct {
	key flightKey // the flight's name in flights
	// ctx is what members wait in; it is cancelled when the attempt failed definitely.
	ctx     context.Context
	cancel  context.CancelFunc
	members int
	running bool
	failed  bool
	answer  answer        // set with failed
	idle    chan struct{} // closed when the last member leaves after a failure
}

// flights is the set of intents attempted in this process; one lock guards it all.
type flights struct {
	mu sync.Mutex
	m  map[flightKey]*flight
}

func newFlights() *flights { return &flights{m: map[flightKey]*flight{}} }

// cancelAll ends every wait for an attempt (members stop waiting in PrepareWait).
func (fs *flights) cancelAll() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.m {
		f.cancel()
	}
}

func (fs *flights) join(key flightKey) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.m[key]
	if f == nil {
		f = &flight{key: key}
		f.ctx, f.cancel = context.WithCancel(context.Background())
		fs.m[key] = f
	}
	f.members++
	return f
}

// The methods below take the intent for their callers' convenience; a flight knows its own key.

// leave ends a member's wait: it returns the failure the member must answer with, if any,
// and records whether the member became the holder.
func (fs *flights) leave(_ string, f *flight, holder bool) (answer, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.members--
	if f.failed {
		if f.members == 0 && f.idle != nil {
			close(f.idle)
			f.idle = nil
		}
		return f.answer, true
	}
	if holder {
		f.running = true
	}
	fs.forgetIfUnused(f)
	return answer{}, false
}

// done ends the holder's run without a failure to share (success or unknown outcome: the
// members learn it from the ledger).
func (fs *flights) done(_ string, f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.running = false
	fs.forgetIfUnused(f)
}

func (fs *flights) forgetIfUnused(f *flight) {
	if f.members == 0 && !f.running {
		if fs.m[f.key] == f {
			delete(fs.m, f.key)
		}
		f.cancel()
	}
}

// fail publishes the holder's failure to the members and returns once none of them is still
// waiting, so the intent can be released without a member claiming it.
func (fs *flights) fail(_ string, f *flight, a answer) {
	fs.mu.Lock()
	if fs.m[f.key] == f {
		delete(fs.m, f.key) // later arrivals start a new attempt
	}
	f.running, f.failed, f.answer = false, true, a
	var idle chan struct{}
	if f.members > 0 {
		idle = make(chan struct{})
		f.idle = idle
	}
	f.cancel()
	fs.mu.Unlock()
	if idle != nil {
		<-idle
	}
}

// fencedCall runs one fenced call and returns the tools/call result for the agent.
func (p *Proxy) fencedCall(ctx context.Context, tool string, id identity, params json.RawMessage, task bool) answer {
	s := p.settings(tool)
	req := p.withPrivacy(fence.Request{Intent: id.intent, Tool: tool, Args: id.args, ExactArgs: id.exact, Agent: p.agentName(), RerunSafe: s.RerunSafe, ReplayWindow: s.ReplayWindow, Carrier: p.carrier(p.live())})
	if ctx.Value(followingKey{}) != nil {
		// A follower's pass (followFlight) claims the intent only when the attempt it followed
		// ended without an outcome to share, and releases that claim at once, running nothing.
		// Its claim is recorded re-run safe and with no carrier, which is what it is: nothing
		// was sent for it, so if its wrap dies before the release (kill -9), the next attempt
		// takes the claim over and runs the call, once, rather than find the intent fenced as
		// unknown (an effect that may have happened) for an operator to clear. Before
		// 2026-12-07 it was an ordinary claim, and such a kill left that false unknown
		// (TestFollowerClaimIsTakenOverOnceItsWrapIsGone).
		req.RerunSafe, req.Carrier = true, ""
	}
	// Waiters join only an attempt of the very same call: under --key two calls can share an
	// intent with different arguments, and one must never receive the other's failure (the
	// engine refuses the second with intent_conflict).
	f := p.flights.join(id.flightKey())
	// A duplicate waits for the attempt it duplicates until the attempt ends or its own agent
	// cancels it (ctx is the request's: only notifications/cancelled ends it). Nothing runs
	// for it, so a cancelled wait just ends: no response (MCP), counted as refused in flight.
	// The cancellation never reaches the claim: a call the ledger admits is the attempt, and
	// is seen through (see run).
	// It also stops waiting when this proxy's stop is past its grace: the duplicate holds
	// nothing inside the server, and its wait (--wait) would hold the stop, and so the
	// gateway session being stopped (counted under --max-sessions), past the grace. Before,
	// only a stop of the whole process ended it (Shared.Abandon).
	began := time.Now()
	wait := s.Wait
	if ctx.Value(followingKey{}) != nil {
		// A follower's pass (followFlight) waits longer than --wait: nobody waits on its
		// answer, and each pass ends with a last read of the ledger, and the next begins with
		// one.
		wait = max(wait, followPass)
	}
	// The ledger's reads and writes end with claimBound, past the wait: a PostgreSQL server
	// that stops answering on a network that still acknowledges (a stopped server, a proxy
	// holding its connections) otherwise held the call until it answered, the agent's
	// cancellation never reaching the claim (TestClaimOnAFrozenLedgerIsAnswered). A claim
	// cut short is not admitted; if it landed all the same, the engine releases it once the
	// ledger answers (a lost claim: nobody holds its ticket).
	bound := wait + p.claimBound()
	ledger, endLedger := context.WithTimeout(f.ctx, bound)
	stopWatch := context.AfterFunc(p.graceOver, endLedger)
	// The answer is counted once this call will not ask the ledger again: a call that asks
	// again (below) counts only its last answer, not a refusal beside it.
	// A call asking again (after DrainedFor, or after the person settled an unknown) is the
	// same call: it carries what its first wait learned (the claim it waited on), so that a
	// failure of that claim since is shared with it, not run again (fence.Waited).
	waited, _ := ctx.Value(waitedKey{}).(*fence.Waited)
	if waited == nil {
		waited = new(fence.Waited)
	}
	adm, decision, err := p.claim(ledger, req, wait, ctx.Done(), waited)
	bounded := ledger.Err() == context.DeadlineExceeded // a stop or an abandon cancels it instead
	stopWatch()
	endLedger()
	// A flight ended while its members wait, without a failure to share, is one a stopping
	// front gave up on (Shared.Abandon, or drain for a proxy's own flights), or this proxy's
	// stop was past its grace.
	abandoned := f.ctx.Err() != nil || p.graceOver.Err() != nil
	if err != nil && bounded && fence.CodeOf(err) == fence.CodeStore {
		err = fmt.Errorf("the ledger did not confirm this call's claim within %s (the lease, past the wait; the database does not answer, or another process holds the intent's record locked), so nothing ran and a retry may run it: %w", bound, err)
	}
	holder := err == nil && adm.Fresh()
	if !holder && err != nil && ctx.Err() != nil {
		p.opt.Engine.Count(decision)
		p.flights.leave(id.intent, f, false)
		return answer{outcome: "refused", code: fence.CodeOf(err), withdrawn: true}
	}
	if failure, failed := p.flights.leave(id.intent, f, holder); failed {
		// The attempt this call waited for failed definitely: same answer, no second run.
		if holder {
			// A plain release: this claim ran nothing (the flight's answer may not even be a
			// failure: a question of SEP-2322, a call never sent), and a retry that finds it
			// holding the intent must not be told a call it waited for failed; a waiter in
			// another process that was there before is given the flight's own failure
			// (fence.FailedWaitError).
			p.settle(ctx, fence.Outcome{Kind: fence.OutcomeRelease, Ticket: *adm.Ticket, Reason: "not run: coalesced onto an attempt of this process that ended without a result"})
		}
		if failure.code == codeInputRequired && (continues(params) || !p.readsInputRequired(params)) {
			// The attempt was a first round, answered with a question (SEP-2322), which is no
			// outcome; this call carries the client's answers to such a question. Given the
			// question, its answers would never reach the server and the person would be asked
			// again: it goes through the fence itself instead, once (the intent is free once
			// the attempt's members have left). Counted by that answer alone: before
			// 2026-12-06 the wait was counted too, refused in flight, and the one call twice
			// (TestContinuationWaitingOnAFirstRoundRuns).
			// So does a call whose client cannot read the question: it negotiated a version
			// of MCP before multi round-trip requests (another session of a gateway than the
			// one that asked), and its server answers it otherwise. Before 2026-12-07 it was
			// handed the question, which the TypeScript SDK 1.32 reads as a result with no
			// content, a success, though nothing had run
			// (TestQuestionIsNotHandedToASessionThatCannotReadIt).
			// Every time: going through again, it may wait on another identical call's first
			// round (one that claimed the intent as the last one released it), and that
			// question is no more its answer than the first was. Before 2026-12-07 it went
			// through once only, and was handed the second round's question
			// (TestRerunWaitingOnAnotherFirstRoundRunsAgain). Each pass waits on a round the
			// server answered; its agent's cancellation and the proxy's stop end it, and so
			// does maxQuestionReruns (2026-12-07): before, a call went on through the fence for
			// as long as identical first rounds kept taking the intent before it, each its own
			// question (TestQuestionRerunsAreBounded).
			n, _ := ctx.Value(questionRerunsKey{}).(int)
			if n >= maxQuestionReruns {
				p.opt.Engine.Count(decision)
				return answer{result: toolError(fmt.Sprintf("this call waited on %d identical calls in a row that each ended with a question (input_required: another agent asked the same and was asked for more input), and would wait on the next. This call was NOT executed; send it again.", n+1), codeQuestionReruns, id.intent)}.as("refused", codeQuestionReruns)
			}
			if rerunning != nil {
				rerunning()
			}
			return p.fencedCall(context.WithValue(ctx, questionRerunsKey{}, n+1), tool, id, params, task)
		}
		p.opt.Engine.Count(decision)
		return failure.as("coalesced", failure.code)
	}
	if err != nil {
		if p.drainedFor(ctx, id.intent, err) {
			// An outcome waiting in the spool (or held in memory) was just recorded: this
			// intent's may have been among them, so the ledger answers again, once, and that
			// answer alone is counted (before 2026-12-06 the refusal was too, and the one call
			// counted twice: TestSpooledOutcomeIsNotAskedAbout).
			// It asks as the waiter it was: before 2026-12-06 it asked as a new call, and a
			// failure of the claim it had waited on, recorded meanwhile, had it run again
			// (contract FailureSharedWithAWaiterThatAsksAgain).
			return p.fencedCall(context.WithValue(context.WithValue(ctx, drainedKey{}, true), waitedKey{}, waited), tool, id, params, task)
		}
		if a, ok := p.priorFailure(context.WithValue(ctx, waitedKey{}, waited), tool, id, params, task, err); ok {
			// Settled by the person's answer and asked again: counted by that answer alone
			// (before 2026-12-06 the refusal was too: TestCallSettledByThePersonIsCountedOnce).
			return a
		}
	}
	if err != nil && task && errors.Is(err, fence.ErrInFlight) && !abandoned && ctx.Err() == nil {
		// A task-augmented call whose attempt still runs past the wait: its agent asked for a
		// task it can poll, so it gets one of wrap's own that follows the attempt
		// (followFlight), asking the ledger again until the attempt ends. Before 2026-12-07
		// it was a failed task saying the call was in flight, which an SDK client hands its
		// agent as "Task … failed" while the first execution ran on
		// (TestTaskAugmentedDuplicateFollowsTheFlight). Not counted here: the follower counts
		// its last answer alone.
		return answer{result: p.refusal(id.intent, err, s.Wait), outcome: "coalesced", code: codeFollowing, follow: true, decision: decision}
	}
	p.opt.Engine.Count(decision)
	if err != nil {
		if abandoned && errors.Is(err, fence.ErrInFlight) {
			return answer{result: p.abandonedWait(id.intent, err, time.Since(began))}.as("refused", fence.CodeOf(err))
		}
		if errors.Is(err, fence.ErrFailedWait) {
			// Given the failure of the attempt it waited for, as a duplicate in this
			// process is (flights): coalesced onto it.
			return answer{result: p.refusal(id.intent, err, s.Wait)}.as("coalesced", fence.CodeOf(err))
		}
		return answer{result: p.refusal(id.intent, err, s.Wait)}.as("refused", fence.CodeOf(err))
	}
	if !holder {
		info, _, _ := p.tools.get(tool)
		return answer{result: replayOf(adm, info.outputSchema)}.as("replayed", "")
	}
	if why, ok := ctx.Value(unlistedKey{}).(error); ok {
		// Admitted without the server's listing (toolInfo failed): it cannot be sent, so the
		// claim is released at once and the agent told nothing ran; a retry runs the call,
		// once, when the listing can be read.
		p.settle(ctx, fence.Outcome{Kind: fence.OutcomeRelease, Ticket: *adm.Ticket, Reason: "not run: the MCP server's tool list could not be read"})
		p.flights.done(id.intent, f)
		p.opt.Engine.Count(decision)
		return answer{result: toolsUnknown(why, tool)}.as("refused", CodeToolsUnknown)
	}
	if ctx.Value(followingKey{}) != nil {
		if followerClaimed != nil {
			followerClaimed(id.intent)
		}
		// The follower of a task-augmented duplicate (followFlight) runs nothing: the attempt
		// it followed ended without an outcome to share (it was never sent, or was answered
		// with a question), so the intent was free and this claim took it. Released at once;
		// its agent is told nothing ran, and a retry runs the call, once.
		p.settle(ctx, fence.Outcome{Kind: fence.OutcomeRelease, Ticket: *adm.Ticket, Reason: "not run: a task-augmented duplicate followed an attempt that ended without an outcome to share"})
		p.flights.done(id.intent, f)
		p.opt.Engine.Count(decision)
		return answer{result: toolError("the identical call this task followed ended without a result to share (it was not sent, or the server answered it with a question). This call was NOT executed; send it again to run it.", codeFollowEnded, id.intent)}.as("refused", codeFollowEnded)
	}
	if task {
		return p.runTask(ctx, tool, id.intent, f, *adm.Ticket, req.Carrier, params)
	}
	return p.run(ctx, tool, id.intent, f, *adm.Ticket, req.Carrier, params)
}

// claimStuckWait is how long a claim may go on past the end of its context before the call is
// answered without it (claim): longer than a store takes to give up once the context ended
// (PostgreSQL's 5 s to ask whether a claim whose answer was lost was recorded).
var claimStuckWait = 10 * time.Second

// claimReleased is the reason a claim answered without it is released with, if it lands.
const claimReleased = "the call was answered before the ledger confirmed its claim (the ledger did not answer), so it was never sent: released once the ledger answered"

// claim is PrepareWaitWith (waited: what the call's earlier asks learned), bounded even
// where the store cannot stop: a SQLite write blocked inside the kernel (the ledger's file
// system frozen by fsfreeze, as backup and snapshot tools do, or a network disk that hangs:
// the writer waits in a page fault on the ledger's index) ends with its context only once
// the disk answers, and the call's answer waited for it: a claim on a frozen disk was
// answered only once the disk thawed (2 minutes and more later, whatever --wait and the
// lease; TestClaimOnAFrozenDiskIsAnswered). So the
// claim runs beside the call (Engine.PrepareWaitBesideWith), which is answered store_error
// (nothing ran) claimStuckWait after ctx ended; a claim that lands all the same once the disk
// answers is released by the engine, its call never sent, so the retry the agent was told it
// may send then runs it, once: also a retry that meets it first, and, through the spool, the
// next wrap if this one stops before it lands.
func (p *Proxy) claim(ctx context.Context, req fence.Request, wait time.Duration, giveUp <-chan struct{}, waited *fence.Waited) (fence.Admission, fence.Decision, error) {
	adm, decision, err := p.opt.Engine.PrepareWaitBesideWith(ctx, req, wait, giveUp, claimStuckWait, claimReleased, waited)
	if errors.Is(err, fence.ErrClaimStuck) {
		p.logf("intent %s: the ledger has not answered (its claim, or a duplicate's read) %s after the call's wait for it ended; answered without it, and a claim released if it is recorded", req.Intent, claimStuckWait)
	}
	return adm, decision, err
}

// claimBound is how long a call's claim may take the ledger, past its wait: the lease. It ends
// a hang; it does not keep the claim's lease, which runs from the server's commit: a fresh
// claim answered late is admitted with less of its lease left, or none, and judged by other
// processes meanwhile as any holder stalled past its lease (docs/wrap.md).
func (p *Proxy) claimBound() time.Duration {
	if lease := p.opt.Engine.Config().LeaseTTL; lease > 0 {
		return lease
	}
	return fence.DefaultLeaseTTL
}

// followingKey marks the passes of a task-augmented duplicate's follower (followFlight),
// which never run the call.
type followingKey struct{}

// codeFollowing is the code of a task-augmented call answered with a working task of wrap's
// own that follows an attempt in flight; codeFollowEnded, of such a task whose attempt ended
// without an outcome to share (nothing ran for it).
const (
	codeFollowing   = "task_following"
	codeFollowEnded = "followed_attempt_ended"
)

// drainedKey marks a call that already drained the spool for its refusal (see drainedFor).
type drainedKey struct{}

// waitedKey carries the *fence.Waited of a call that asks the ledger again (fencedCall).
type waitedKey struct{}

// questionRerunsKey carries how many times a call went through the fence again after waiting
// on a first round answered with a question (fencedCall).
type questionRerunsKey struct{}

// maxQuestionReruns bounds those passes: each waited on a real round of another call, so a
// call meeting more in a row is refused (codeQuestionReruns, nothing ran) rather than waiting
// on for as long as they come.
var maxQuestionReruns = 8

// codeQuestionReruns is the code of a call refused at maxQuestionReruns.
const codeQuestionReruns = "question_reruns"

// followerClaimed, when set (by tests), is called as a follower's pass (followFlight) holds the
// claim it took, before it releases it.
var followerClaimed func(intent string)

// rerunning, when set (by tests), is called as a call that waited on a first round goes
// through the fence again (see fencedCall).
var rerunning func()

// codeInputRequired is the code of an answer that asks for more input (SEP-2322).
const codeInputRequired = "input_required"

// continues reports whether tools/call params continue a multi round-trip call (SEP-2322):
// they carry the client's inputResponses, or the server's requestState. A server may ask for
// nothing but a retry (an input_required result with a requestState and no inputRequests,
// "still waiting" for an approval given elsewhere), and the client's continuation then
// carries the requestState alone: before 2026-12-07 that one was taken for a first round
// (TestStateOnlyContinuationWaitingOnAFirstRoundRuns). params must be a valid JSON object.
func continues(params json.RawMessage) bool {
	for m := range jsonrpc.Members(params) {
		key := params[m.Key:m.KeyEnd]
		if (jsonrpc.KeyIs(key, "inputResponses") || jsonrpc.KeyIs(key, "requestState")) && string(params[m.Start:m.End]) != "null" {
			return true
		}
	}
	return false
}

// inputRequiredSince is the first version of MCP with multi round-trip requests (SEP-2322):
// a server answers input_required only to a client that negotiated it or a later one.
const inputRequiredSince = "2026-07-28"

// readsInputRequired reports whether the client of the tools/call params can read an
// input_required answer: the version of MCP it speaks, the request's own (2026-07-28 has every
// request name it in _meta) or else the one its session negotiated, is inputRequiredSince or
// later. MCP's versions are dates, YYYY-MM-DD, so they compare as strings. A version that
// cannot be read is taken as an earlier one: the server then answers the call itself.
func (p *Proxy) readsInputRequired(params json.RawMessage) bool {
	v := protocolVersionOf(jsonrpc.MemberValue(jsonrpc.MemberValue(params, "_meta"), "io.modelcontextprotocol/protocolVersion"))
	if v == "" {
		if s := p.live(); s != nil {
			v = protocolVersionOf(jsonrpc.MemberValue(s.InitResult(), "protocolVersion"))
		}
	}
	return v != "" && v >= inputRequiredSince
}

// protocolVersionOf is raw when it is a JSON string of the form YYYY-MM-DD, else "".
func protocolVersionOf(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	v := jsonrpc.Unquote(raw)
	if len(v) != len("2006-01-02") {
		return ""
	}
	if _, err := time.Parse("2006-01-02", v); err != nil {
		return ""
	}
	return v
}

// drainedFor reports whether a refused call should ask the ledger again: it was refused as
// of unknown outcome while its outcome waited in the spool or in memory, which was just
// recorded (Engine.DrainedFor). Once per call (drainedKey).
func (p *Proxy) drainedFor(ctx context.Context, intent string, err error) bool {
	if ctx.Value(drainedKey{}) != nil {
		return false
	}
	drained, derr := p.opt.Engine.DrainedFor(ctx, err)
	if derr != nil {
		p.logf("intent %s is fenced as unknown; recording the outcomes waiting in the spool first: %v", intent, derr)
	}
	return drained
}

func (p *Proxy) agentName() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.agent == "" {
		return "wrap"
	}
	return p.agent
}

// run forwards an admitted call to the child, heartbeating its lease, and records the outcome;
// carrier is the one its claim named (carry).
// The call is detached from the agent's cancellation once it is forwarded: it is seen
// through. Until then, while it waits for a slot of the semaphore, the agent's cancellation
// ends it with ErrNotSent: it never reached the server, so nothing of it is kept. A (re)start
// of the child is waited for detached (it is bounded by the init timeout): a start cut short
// by one agent's cancellation would fail every call for RestartBackoff.
func (p *Proxy) run(ctx context.Context, tool, intent string, f *flight, t fence.Ticket, carrier string, params json.RawMessage) answer {
	agent := ctx
	ctx = context.WithoutCancel(ctx)
	// The lease is renewed from the start, while a (re)start of the server is waited for too
	// (bounded by the init timeout, which may exceed the lease). The session next: the claim
	// must name the server process the call goes to before it goes (carry).
	hb := p.heartbeat(t)
	s, err := p.session(ctx)
	if err == nil {
		t, err = p.carry(ctx, t, carrier, s, hb)
	}
	var res json.RawMessage
	if err == nil {
		p.hide(s, tool, params)
		res, err = p.callBoundedUntil(agent, ctx, s, "tools/call", params)
	}
	if err == nil {
		// A server may answer a call that asked for no task with one (the tasks extension,
		// SEP-2663, says it may): its outcome is the task's final result (tasks.go).
		if a, ok := p.followHandle(ctx, tool, intent, f, t, params, res, s, hb, false); ok {
			return a
		}
	}
	if unknown(err) {
		p.awaitExit(s) // the claim is kept while the server may still run the call
	}
	hb.stop()
	return p.finish(ctx, tool, intent, f, t, res, err, false, params)
}

// finish records the outcome of an admitted call, plain (run) or task-augmented (the task's
// final answer), through settle, and returns the answer the agent receives. Every outcome goes
// through Engine.Settle: retried while the ledger does not answer, kept in the spool past
// SettleWait, each error logged.
//
// params are the call's: its redacted argument values (redactedTexts) are taken out of the
// server's words (an error message, the end of its stderr) before those become a recorded
// reason. They are found only then, so a call that succeeds does not decode its arguments again.
func (p *Proxy) finish(ctx context.Context, tool, intent string, f *flight, t fence.Ticket, res json.RawMessage, err error, task bool, params json.RawMessage) answer {
	var rpc *jsonrpc.Error
	var flags resultFlags
	if err == nil {
		if flags = readResult(res); flags.twoWays != "" {
			// Whether the tool failed cannot be told: its outcome is unknown, as for an
			// answer that is not a JSON-RPC response.
			err = fmt.Errorf("its result is read two ways: %s", flags.twoWays)
		}
	}
	switch {
	case err == nil && flags.inputRequired:
		// The server asks for more input (SEP-2322): not an outcome. Nothing final happened;
		// the client's continuation (the same call with inputResponses and requestState, under
		// a new id) is the same intent and is fenced like any call.
		a := answer{result: res, outcome: "executed", code: codeInputRequired}
		p.flights.fail(intent, f, a)
		p.release(ctx, t, "the server asked for more input (input_required): not an outcome")
		return a
	case err == nil && !flags.isError:
		defer p.flights.done(intent, f)
		_, cerr := p.settle(ctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: t, Result: res})
		var invalid fence.InvalidError
		if errors.As(cerr, &invalid) {
			// The ledger answered but cannot take this result (not JSON it can record): the
			// call ran, so its intent is fenced as failed rather than left to lapse.
			p.logf("tool %s ran but its result could not be recorded for intent %s: %v", tool, intent, cerr)
			p.settle(ctx, fence.Outcome{Kind: fence.OutcomeAbort, Ticket: t, Reason: "the result could not be recorded: " + cerr.Error()})
		}
		if undurable(cerr) {
			// The session stopped while the outcome was in neither the ledger nor the spool:
			// the result is not durable, so it is not the answer (SPEC §4). The claim ends
			// with this process and is fenced as unknown by the next one.
			msg := fmt.Sprintf("the tool ran, but its outcome could not be recorded (%v) before this wrap stopped, so its intent will be fenced as unknown. It will NOT be executed again automatically. Check the real system; %s", cerr, p.operatorAdvice(intent, t.Token))
			return answer{result: toolError(msg, fence.CodePriorFailure, intent), outcome: "unknown"}
		}
		return answer{result: res, outcome: "executed"}
	case err == nil:
		a := answer{result: res, outcome: "executed", code: "is_error"}
		p.flights.fail(intent, f, a)
		p.failed(ctx, t, "the tool answered isError: a definite failure")
		return a
	case errors.As(err, &rpc):
		a := answer{err: rpc, outcome: "executed", code: "rpc_error"}
		p.flights.fail(intent, f, a)
		refused := "the MCP server refused the call: "
		if task {
			refused = "the MCP server refused the call or failed the task: "
		}
		p.failed(ctx, t, refused+scrub(rpc.Message, p.redactedTexts(tool, params)))
		return a
	case errors.Is(err, mcpstdio.ErrNotSent):
		a := answer{result: toolError(fmt.Sprintf("the call was not sent and did not run: it did not reach the MCP server (%v); a retry may run it", err), "", intent), outcome: "refused", code: "not_sent"}
		if errors.Is(err, context.Canceled) {
			// Its own agent cancelled it while it waited for a slot: nothing ran, and that is
			// no answer for the duplicates waiting on it, which cancelled nothing. The intent
			// is released and they go on waiting in the ledger, where one of them claims it
			// and runs the call. (Before, they were all told "not sent".)
			p.flights.done(intent, f)
			p.release(ctx, t, "the call was cancelled by its agent before it was sent")
			return a
		}
		p.flights.fail(intent, f, a)
		p.release(ctx, t, "the call was never sent: "+scrub(err.Error(), p.redactedTexts(tool, params)))
		return a
	default:
		defer p.flights.done(intent, f)
		reason := "the MCP server died or the connection failed during the call: " + scrub(err.Error(), p.redactedTexts(tool, params))
		msg := fmt.Sprintf("the MCP server failed during this call (%v), so whether it took effect is unknown", err)
		if p.graceOver.Err() != nil {
			// A stop's grace ended with the call still inside the server, and the stop then
			// closed the server: that ended the call, not a failure of the server. Before,
			// the reason (in the ledger, the retry's refusal, the on_unknown hook) said the
			// server died, for a session its client deleted or a gateway sent SIGTERM.
			why := p.stopReason()
			reason = fmt.Sprintf("effectfence stopped the MCP server with the call inside it (%s; the call had not ended within the grace of %s): %s", why, p.opt.Grace, scrub(err.Error(), p.redactedTexts(tool, params)))
			msg = fmt.Sprintf("effectfence stopped the MCP server while this call was inside it (%s; the call had not ended within the grace of %s), so whether it took effect is unknown", why, p.opt.Grace)
		}
		if task {
			reason = "the task's outcome could not be learned: " + scrub(err.Error(), p.redactedTexts(tool, params))
			msg = fmt.Sprintf("the outcome of this task-augmented call is unknown (%v)", err)
		}
		if flags.twoWays != "" {
			reason = "the MCP server answered, but " + scrub(err.Error(), p.redactedTexts(tool, params))
			msg = fmt.Sprintf("the MCP server answered this call with a result whose outcome cannot be told (%s), so whether it took effect is unknown", flags.twoWays)
		}
		p.settle(ctx, fence.Outcome{Kind: fence.OutcomeLost, Ticket: t, Reason: reason})
		p.reportUnknown(intent, tool, reason, t.Token, true)
		p.logf("intent %s: %s; it is fenced: %s", intent, reason, p.operatorAdvice(intent, t.Token))
		return answer{result: toolError(msg+". It will NOT be executed again automatically. Check the real system; "+p.operatorAdvice(intent, t.Token), fence.CodePriorFailure, intent), outcome: "unknown"}
	}
}

// unknown reports whether err leaves a sent call's outcome unknown in finish: neither a result,
// nor the server's JSON-RPC error, nor a call that never reached the server.
func unknown(err error) bool {
	var rpc *jsonrpc.Error
	return err != nil && !errors.As(err, &rpc) && !errors.Is(err, mcpstdio.ErrNotSent)
}

func (p *Proxy) release(ctx context.Context, t fence.Ticket, reason string) {
	p.settle(ctx, fence.Outcome{Kind: fence.OutcomeRelease, Ticket: t, Reason: reason})
}

// failed releases the claim of a call the server answered with a definite failure: the
// intent is free, and a duplicate waiting on this claim in another process (a second wrap or
// gateway replica on the ledger) is given the failure, as this process's own are (flights),
// rather than run the call again (fence.FailedWaitError).
func (p *Proxy) failed(ctx context.Context, t fence.Ticket, reason string) {
	p.settle(ctx, fence.Outcome{Kind: fence.OutcomeFailure, Ticket: t, Reason: reason})
}

// settle records an outcome through Engine.Settle: retried with the same ticket while the
// ledger does not answer, for up to SettleWait, then left in the spool for the next drain.
// Every error is logged; none is dropped silently.
//
// An outcome that neither the ledger nor the spool took within SettleWait (a full disk holds
// both, say) is held in the engine's memory only: a crash would lose it, and a duplicate
// would then be told the outcome is unknown. The call's answer waits for it (SPEC §4: an
// outcome is durable before the fence answers): settle keeps trying, SettleWait at a time,
// until the ledger or the spool takes it, or the session stops (the agent is gone then).
func (p *Proxy) settle(ctx context.Context, o fence.Outcome) (*fence.Cert, error) {
	wait := p.opt.SettleWait
	if wait <= 0 {
		wait = p.opt.Engine.Config().LeaseTTL
	}
	if ctx.Done() != nil { // run's context is detached already
		ctx = context.WithoutCancel(ctx)
	}
	for round := 0; ; round++ {
		// A stop ends the wait at once: in a later round when the agent is gone (it cannot
		// be answered any more), in the first once the stop's grace is over (the outcome then
		// goes to the spool, durable, rather than hold the stop for the lease: before, a
		// ledger whose lock another process held kept a stopping wrap 66 s with the default
		// lease, though MCP clients SIGKILL about 4 s after closing its input). The first
		// round's context is a child of graceOver (no goroutine, no callback: Settle reads
		// no values from its context).
		parent, limit := ctx, wait
		if round == 0 {
			parent = p.graceOver
			if p.graceOver.Err() != nil {
				// The grace was over before this outcome came (the stop closed the server,
				// failing the calls inside it): one short try at the ledger, then the spool.
				// Without it every call a stop cut went to the spool, logged as "the ledger
				// did not take the outcome (context canceled)" with the ledger idle.
				parent, limit = ctx, min(wait, stopSettleWait)
			}
		}
		sctx, cancel := context.WithTimeout(parent, limit)
		if round > 0 {
			go func() {
				select {
				case <-p.agentGone:
					cancel()
				case <-sctx.Done():
				}
			}()
		}
		began := time.Now()
		cert, err := p.opt.Engine.Settle(sctx, o)
		cancel()
		var spooled fence.SpooledError
		switch {
		case err == nil:
		case errors.As(err, &spooled):
			p.logf("intent %s: %s: %v", o.Ticket.Intent, outcomeName(o.Kind), err)
		case errors.Is(err, fence.ErrStaleReadSet):
		case round == 0:
			p.logf("intent %s: recording the %s: %v", o.Ticket.Intent, outcomeName(o.Kind), err)
		}
		if !undurable(err) {
			if round > 0 {
				p.logf("intent %s: the %s is kept now (%s); answering the call", o.Ticket.Intent, outcomeName(o.Kind), keptWhere(err))
			}
			return cert, err
		}
		select {
		case <-p.agentGone:
			p.logf("intent %s: stopping with the %s in neither the ledger nor its spool: it ends with this process, and the intent's claim is then judged as any whose holder is gone (unknown unless re-run safe)", o.Ticket.Intent, outcomeName(o.Kind))
			return cert, err
		default:
		}
		if round == 0 {
			p.logf("intent %s: the %s is in neither the ledger nor its spool; the call's answer waits until one of them takes it", o.Ticket.Intent, outcomeName(o.Kind))
		}
		// A Settle that gives up at once (its engine closed, so it does not wait out its
		// context) is not tried again in a busy loop.
		if time.Since(began) < settleRoundFloor {
			select {
			case <-p.agentGone:
			case <-time.After(settleRoundFloor):
			}
		}
	}
}

// settleRoundFloor is the least time between two rounds of settle.
const settleRoundFloor = 100 * time.Millisecond

// stopSettleWait bounds the ledger's turn for an outcome that comes after a stop's grace: a
// ledger that does not take it by then leaves it to the spool, within the time MCP clients
// give a stopping server.
const stopSettleWait = 500 * time.Millisecond

// undurable reports whether Settle's err leaves the outcome in neither the ledger (which
// answers with a cert or a coded refusal) nor the spool (SpooledError).
func undurable(err error) bool {
	var spooled fence.SpooledError
	return err != nil && fence.CodeOf(err) == fence.CodeStore && !errors.As(err, &spooled)
}

// outcomeName names an outcome in the log: "result", "release", "failed outcome" or "unknown
// outcome" (before, the kind itself: "lost of tool outcome", "recording lost").
func outcomeName(k fence.OutcomeKind) string {
	switch k {
	case fence.OutcomeCommit:
		return "result"
	case fence.OutcomeRelease:
		return "release"
	case fence.OutcomeFailure:
		return "release of a failed call"
	case fence.OutcomeAbort:
		return "failed outcome"
	case fence.OutcomeLost:
		return "unknown outcome"
	}
	return string(k) + " outcome"
}

// keptWhere says where a settled outcome is kept.
func keptWhere(err error) string {
	if err != nil && fence.CodeOf(err) == fence.CodeStore {
		return "in the spool"
	}
	return "in the ledger"
}

// heartbeat renews the lease every third of its TTL until the returned beats' stop is
// called; stop cancels a renewal in progress and waits for it to end. It uses a timer rather than a goroutine per
// call.
func (p *Proxy) heartbeat(t fence.Ticket) *beats {
	b := &beats{p: p, t: t, every: p.opt.Engine.Config().LeaseTTL / 3}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.mu.Lock()
	b.timer = time.AfterFunc(b.every, b.beat)
	b.mu.Unlock()
	return b
}

// beats is the heartbeat of one call's lease, one allocation with its state.
type beats struct {
	p     *Proxy
	every time.Duration
	// ctx is a renewal's: stop cancels it, so a renewal waiting for the ledger (another
	// process holding a SQLite ledger's write lock) gives up rather than hold the call's
	// answer until the store's busy timeout.
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	t       fence.Ticket // guarded by mu, as are the fields below
	stopped bool
	timer   *time.Timer
	// carry is a carrier the next renewals record (Engine.Carry) until one has, guarded by cm
	// alone: later sets it while a renewal may be waiting for the ledger under mu.
	cm    sync.Mutex
	carry string
	// failed counts the renewals that failed in a row (again), guarded by mu.
	failed int
}

func (b *beats) beat() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	var next fence.Ticket
	var err error
	b.cm.Lock()
	carry := b.carry
	b.cm.Unlock()
	ctx, cancel := context.WithTimeout(b.ctx, b.tryFor())
	if carry != "" {
		next, err = b.p.opt.Engine.Carry(ctx, b.t, carry)
	} else {
		next, err = b.p.opt.Engine.Heartbeat(ctx, b.t)
	}
	cancel()
	switch {
	case err == nil:
		b.t = next
		b.cm.Lock()
		if b.carry == carry {
			b.carry = ""
		}
		b.cm.Unlock()
	case errors.Is(err, fence.ErrLeaseLost):
		b.p.logf("heartbeat of intent %s: %v", b.t.Intent, err)
		return // nothing left to renew
	case b.ctx.Err() != nil:
		return // stopped while it waited for the ledger
	default:
		if b.failed == 0 {
			b.p.logf("heartbeat of intent %s: %v; tried again until the ledger takes it", b.t.Intent, err)
		}
		b.timer.Reset(b.again())
		return
	}
	if b.failed > 0 {
		b.p.logf("heartbeat of intent %s: renewed after %d failed tries", b.t.Intent, b.failed)
		b.failed = 0
	}
	b.timer.Reset(b.every)
}

// again is the wait before the next try of a renewal that failed: from renewRetryFirst,
// doubling up to renewRetryMost, never more than a renewal's own wait. Before, a failed
// renewal was tried again a third of the lease later, so a ledger away for two renewals (a
// PostgreSQL failover or restart of 20 to 40 s under the default lease) saw the third only
// once the lease had lapsed, though it had been back for up to a third of it: a judge that
// cannot see the holder took a re-run-safe call over while it ran, and fenced any other as
// unknown (TestRenewalAfterAFailureComesBeforeTheLeaseLapses).
func (b *beats) again() time.Duration {
	d := renewRetryFirst << min(b.failed, 8)
	b.failed++
	return min(d, renewRetryMost, b.every)
}

// renewRetryFirst and renewRetryMost bound the waits between tries of a failed renewal, as
// Settle's between tries of an outcome.
const (
	renewRetryFirst = 50 * time.Millisecond
	renewRetryMost  = 2 * time.Second
)

// tryFor bounds one try of a renewal: a third of what is left of the lease, at least
// renewTryLeast, at most a renewal's own wait. A connection that no longer answers (a
// PostgreSQL server that failed over, a NAT or load balancer that forgot it: no reset, the
// kernel retransmitting for minutes) holds a try until it is ended, and each try so ended
// leaves the lease time for more, the ledger reached through another connection (a pool's
// idle ones are each tried first, so one try may be spent on each). A ledger that is only
// slow (another process's turn on a SQLite ledger) has the first try a third of the rest of
// the lease (13 s of the default's 40) to answer. Before, a renewal that met such a connection
// held every later one while the lease lapsed (TestRenewalOverAConnectionThatNoLongerAnswersIsTriedAgain).
func (b *beats) tryFor() time.Duration {
	return min(max(time.Until(b.t.LeaseUntil)/3, renewTryLeast), b.every)
}

// renewTryLeast is the least time a try of a renewal is given.
const renewTryLeast = time.Second

// hold renews the claim at once naming carrier, its server's process group, as held
// (fence.Held; "": none to name, nothing done), and so do the renewals after it until one has
// (a ledger that does not answer in time leaves that to the next, logged). A task runs in
// the server on its own, and should wrap stop following it while the server runs (its wait
// over, the server forgetting it, an answer wrap cannot read), the server may still finish it
// after its outcome was recorded unknown. Judged by its carrier alone, an unknown claim whose
// holder and server both run is taken as answered for by the live server, so an operator's
// clear went through at once, and the next attempt could run the call a second time while the
// task still ran. Held, the claim is not cleared (nor resolved as not having happened) while
// that server runs. A remote server names no group: its task is not followed this way.
func (b *beats) hold(carrier string) {
	if carrier == "" {
		return
	}
	b.cm.Lock()
	b.carry = carrier
	b.cm.Unlock()
	b.beat()
}

// later makes the next renewals record carrier (Engine.Carry) until one has, unless a carrier
// is to be recorded already (hold's, which names the same group). It does not wait for a
// renewal in progress (one waiting for the ledger's lock may take the store's busy timeout).
func (b *beats) later(carrier string) {
	if carrier == "" {
		return
	}
	b.cm.Lock()
	if b.carry == "" {
		b.carry = carrier
	}
	b.cm.Unlock()
}

// stop ends the heartbeat: a renewal in progress is cancelled, and stop returns once it has
// ended. Before, stop waited for it to finish under no deadline: a renewal waiting for
// another process's write lock on a SQLite ledger held the call's answer for the store's
// busy timeout (30 s), whatever the lease, before the outcome was even tried.
func (b *beats) stop() {
	b.cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	b.timer.Stop()
}

// isError says whether a tool result says it failed: its isError is true.
func isError(res json.RawMessage) bool { return readResult(res).isError }

// resultFlags is what a tool result says of its outcome.
type resultFlags struct {
	isError bool
	// inputRequired: the result is an interim InputRequiredResult (SEP-2322), its resultType
	// "input_required" ("input\u005frequired" is that too, to every reader).
	inputRequired bool
	// task: the result is a task handle of the tasks extension (SEP-2663), its resultType
	// "task" (followFlat).
	task bool
	// twoWays, when not empty, says why readers disagree on one of them: the outcome cannot
	// be told from the result.
	twoWays string
}

// readResult reads the members of a tool result that say what became of the call, isError
// and resultType, as MCP's SDKs read them: spelled so, the last one, isError a boolean.
// Readers disagree on a result with a member spelled as one of them but for case whose value
// would change the answer ("IsError":true: Go's encoding/json, and wrap before 2026-12-03,
// took it for isError, the TypeScript and Python SDKs ignore it, so the agent was shown a
// success while wrap freed the intent and a retry ran again), or with an isError that is not a
// boolean ("true", 1, null: encoding/json reads no failure and wrap recorded it; the TypeScript
// SDK refuses the result, Python's lax booleans read "true" and 1 as a failure).
func readResult(res json.RawMessage) resultFlags {
	var f resultFlags
	i := jsonrpc.SkipSpace(res, 0)
	if i == len(res) || res[i] != '{' {
		return f
	}
	if !bytes.Contains(res, []byte("true")) && !bytes.Contains(res, []byte("isError")) &&
		!bytes.Contains(res, []byte("input_required")) && !bytes.Contains(res, []byte("task")) && bytes.IndexByte(res, '\\') < 0 {
		return f // neither member can say anything: most results
	}
	var foldError, foldType []byte // the last non-null value of a member named so but for case, as encoding/json reads it
	for m := range jsonrpc.Members(res) {
		lit := res[m.Key:m.KeyEnd]
		name := lit[1 : len(lit)-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			name = []byte(jsonrpc.Unquote(lit))
		}
		raw := res[m.Start:m.End]
		switch {
		case bytes.EqualFold(name, []byte("isError")):
			if string(name) == "isError" {
				if r := string(raw); r != "true" && r != "false" {
					f.twoWays = fmt.Sprintf("its isError is %s, not a boolean: SDKs refuse such a result or read it as they please", clip(string(raw), 40))
					return f
				}
				f.isError = string(raw) == "true"
			}
			if string(raw) != "null" {
				foldError = raw
			}
		case bytes.EqualFold(name, []byte("resultType")):
			if string(name) == "resultType" {
				f.inputRequired = isString(raw, "input_required")
				f.task = isString(raw, "task")
			}
			if string(raw) != "null" {
				foldType = raw
			}
		}
	}
	switch {
	case (string(foldError) == "true") != f.isError:
		f.twoWays = "a member named isError but for case makes it a failure to Go's encoding/json and not to MCP's other SDKs, or the reverse"
	case isString(foldType, "input_required") != f.inputRequired:
		f.twoWays = "a member named resultType but for case makes it input_required to Go's encoding/json and not to MCP's other SDKs, or the reverse"
	case isString(foldType, "task") != f.task:
		f.twoWays = "a member named resultType but for case makes it a task handle to Go's encoding/json and not to MCP's other SDKs, or the reverse"
	}
	return f
}

// isString says whether raw is the JSON string want (escapes decoded).
func isString(raw []byte, want string) bool {
	return len(raw) > 0 && raw[0] == '"' && jsonrpc.Unquote(raw) == want
}

// toolError builds an isError tool result carrying an effectfence message.
func toolError(msg, code, intent string) json.RawMessage {
	meta := map[string]string{MetaIntent: intent}
	if code != "" {
		meta[MetaCode] = code
	}
	out, _ := json.Marshal(map[string]any{
		"content": []map[string]string{{"type": "text", "text": "effectfence: " + msg}},
		"isError": true,
		"_meta":   meta,
	})
	return out
}

// operatorAdvice tells what settles a fenced intent: "an operator must then run:" and the
// commands (clearCommand), or, for a ledger in wrap's memory, which no command reaches, that
// only a restart of wrap forgets it.
func (p *Proxy) operatorAdvice(intent string, token uint64) string {
	if p.opt.InMemory {
		return "this wrap's ledger is in its memory, which no `effectfence ledger` command can reach: the intent stays fenced until this wrap restarts, which forgets it"
	}
	return "an operator must then run: " + p.clearCommand(intent, token)
}

// clearCommand gives the exact operator commands that settle intent: resolve --happened if it
// took effect, clear if it did not (the clear command last, whole, so it can be pasted); ""
// for a ledger in wrap's memory. token is the claim that failed or went unknown (0: not
// known): the commands carry it (--claim), so that, pasted after the intent was cleared and
// claimed again, they are refused rather than settle the new attempt, whose effect nobody has
// checked (before 2026-12-06 they settled whatever claim held the intent).
func (p *Proxy) clearCommand(intent string, token uint64) string {
	if p.opt.InMemory {
		return ""
	}
	return ClearCommandForClaim(intent, p.opt.ClearHint, token)
}

// ClearCommandFor is the operator commands wrap names for a fenced intent (see clearCommand),
// hint naming the ledger (Options.ClearHint), for whatever claim holds it.
func ClearCommandFor(intent, hint string) string { return ClearCommandForClaim(intent, hint, 0) }

// ClearCommandForClaim is ClearCommandFor of the claim whose fencing token is token (0: any),
// named with --claim (fence.ClaimFlag).
func ClearCommandForClaim(intent, hint string, token uint64) string {
	if c := fence.ClaimFlag(token); c != "" {
		hint = strings.TrimSpace(c + " " + hint)
	}
	if strings.HasPrefix(intent, "-") {
		// Where the commands read flags, such an intent would be read as one (the pasted
		// command failed as usage): it goes last, after "--", and the hint's note after it.
		flags, note, ok := strings.Cut(hint, " (with ")
		if ok {
			note = " (with " + note
		}
		return fmt.Sprintf("effectfence ledger resolve --happened --reason 'checked: <what you verified>' %[2]s -- %[1]s%[3]s if it took effect; if it did not: effectfence ledger clear --reason 'checked: <what you verified>' %[2]s -- %[1]s%[3]s", shellQuote(intent), flags, note)
	}
	return fmt.Sprintf("effectfence ledger resolve %[1]s --happened --reason 'checked: <what you verified>' %[2]s if it took effect; if it did not: effectfence ledger clear %[1]s --reason 'checked: <what you verified>' %[2]s", shellQuote(intent), hint)
}

// refusal turns a fence error into the tool error the agent receives.
func (p *Proxy) refusal(intent string, err error, wait time.Duration) json.RawMessage {
	code := fence.CodeOf(err)
	var msg string
	switch {
	case errors.Is(err, fence.ErrInFlight):
		// Not "the retry will receive the recorded result": the call may fail (the retry then
		// runs it) or end unknown (the retry is told so).
		msg = fmt.Sprintf("an identical call is still running (waited %s for it). This call was NOT executed a second time; retry later: once that call has ended, a retry receives its recorded result, or runs the call if it failed without effect, or is told that its outcome is unknown.", wait)
		var fe fence.InFlightError
		if errors.As(err, &fe) {
			if g, gone := fence.GoneHolderCarrier(fe.Owner); gone {
				// Nobody will record this call's outcome: its holder (a wrap killed mid-call)
				// is gone, and only the server it started still runs the call.
				lapse := fe.LeaseUntil.UTC().Format(time.RFC3339)
				then := fmt.Sprintf("Once that group ends, or the claim's lease lapses at %s, the intent is fenced as unknown for an operator to settle: a retry is then told the commands to run.", lapse)
				contained := !fence.CanTellGone(fe.Owner)
				switch {
				case contained && fe.RerunSafe:
					// A holder this process never judges gone (in a container on this host)
					// is out of sight once its group ends: its claim holds until the lease
					// lapses, and is taken over only then. Before 2026-12-07 the text said at
					// once, and the retry after the group's end was refused as still running.
					then = fmt.Sprintf("The call was declared safe to re-run: once that group has ended and the claim's lease has lapsed at %s, a retry runs it again (the process that sent it ran in a PID namespace of its own, which this one cannot judge gone before then). If the group still runs when the lease lapses, the intent is fenced as unknown for an operator to settle, and a retry is told the commands to run.", lapse)
				case contained:
					then = fmt.Sprintf("When the claim's lease lapses at %s (the process that sent it ran in a PID namespace of its own, which this one cannot judge gone before then), the intent is fenced as unknown for an operator to settle, whether or not that group has ended: a retry is then told the commands to run.", lapse)
				case fe.RerunSafe:
					// A gone holder's re-run safe claim is taken over once its group ends.
					then = fmt.Sprintf("The call was declared safe to re-run: once that group ends, a retry then runs it again. If the group still runs when the claim's lease lapses at %s, the intent is fenced as unknown for an operator to settle, and a retry is told the commands to run.", lapse)
				}
				msg = fmt.Sprintf("an identical call is still running (waited %s for it), but the process that sent it is gone and will record no result: process group %d it started still runs the call (`kill -KILL -- -%d` stops it). This call was NOT executed a second time. %s",
					wait, g, g, then)
			}
		}
	case errors.Is(err, fence.ErrFailedWait):
		fw := fence.FailedWaitError{Reason: "its reason is not known"}
		_ = errors.As(err, &fw)
		msg = fmt.Sprintf("the identical call this one waited for (its outcome read from the ledger) failed: %s. This call was NOT executed a second time; the intent is free, so a retry runs it.", fw.Reason)
	case errors.Is(err, fence.ErrPriorFailure):
		var pf fence.PriorFailureError
		why, until := "", ""
		if errors.As(err, &pf) {
			why = fmt.Sprintf(" (%s: %s)", pf.State, pf.Reason)
			if pf.LeaseRuns() && !p.opt.InMemory { // by the ledger's clock, as the clear judges it
				// The clear below is refused until then (ClearUnlessHeld): say so, rather than
				// have the operator learn it from the refusal.
				until = fmt.Sprintf(" The clear is refused until %s, when the claim's lease lapses (a process the server started may still finish the call); run it after that.", pf.LeaseUntil.UTC().Format(time.RFC3339))
			}
		}
		msg = fmt.Sprintf("an earlier identical call has an unknown outcome%s, so this call was NOT executed again: it might have taken effect already.%s Check the real system; %s", why, until, p.operatorAdvice(intent, pf.Token))
	case errors.Is(err, fence.ErrConflict):
		msg = fmt.Sprintf("this call shares its identity key with a recorded call whose other arguments differ (%v). It was NOT executed and no receipt of the other call is given: the --key for this tool is too narrow for this call.", err)
	case errors.Is(err, fence.ErrInvalid):
		msg = fmt.Sprintf("the call cannot be fenced (%v); it was NOT executed.", err)
	default:
		msg = fmt.Sprintf("the ledger failed (%v); the call was NOT executed.", err)
		p.logf("ledger error for intent %s: %v", intent, err)
	}
	return toolError(msg, code, intent)
}

// abandonedWait is the answer of a duplicate whose wait for an identical call in flight a stop
// ended (after waited): the call it waited for may be cut by the same stop and left unknown,
// so no recorded result is promised to a retry.
func (p *Proxy) abandonedWait(intent string, err error, waited time.Duration) json.RawMessage {
	stopping := "effectfence is stopping"
	if why := p.stopReason(); why != "" {
		stopping += " (" + why + ")"
	}
	msg := fmt.Sprintf("%s, so this call stopped waiting (after %s) for an identical call still running. This call was NOT executed a second time. A retry receives that call's outcome once it is recorded: its result if it ends, or, if the stop cuts it off, that its outcome is unknown, fenced until an operator has checked the real system.", stopping, waited.Round(time.Millisecond))
	return toolError(msg, fence.CodeOf(err), intent)
}

func shellQuote(s string) string {
	for _, r := range s {
		if !(r == '-' || r == '_' || r == ':' || r == '.' || r == '/' || r == '=' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

// ShellJoin quotes argv for a shell, for messages that show a command to run.
func ShellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}
