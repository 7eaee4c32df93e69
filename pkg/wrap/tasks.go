package wrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Tasks (MCP 2025-11-25). A task-augmented tools/call (params.task present) is answered by
// the server with a CreateTaskResult, a handle; the tool's outcome is the task's final
// result, which tasks/result returns once the task is terminal. So for a fenced task:
//
//   - the holder forwards the call and hands the handle to the agent at once (the agent polls
//     tasks/get and fetches tasks/result itself; those pass through unfenced);
//   - the intent stays in flight, heartbeated, while wrap fetches tasks/result itself;
//   - the final result is what is recorded: a success is committed, and later duplicates
//     receive that result (a replay of the final result, not of a handle whose task the
//     server forgets); an isError result or a failed task releases the intent; a lost
//     child, a cancelled task or one the server does not say failed leaves the outcome
//     unknown.
//
// A duplicate, task-augmented or not, that arrives while the task runs waits for the final
// result like any coalesced duplicate and receives it as a plain tool result; a task-augmented
// one still waiting at the end of --wait gets a working task of wrap's own that follows the
// attempt (followFlight).

// taskHandle is the task a CreateTaskResult names, read as MCP's SDKs read it: the members
// "task", then its "taskId" (a non-empty string) and "ttl" (milliseconds the server keeps the
// result; null or absent: no limit), spelled so. ok is false when res names no task (the
// server answered the call directly). Before 2026-12-03 encoding/json read it, which also
// takes "Task" and "TaskId" (the last of each when given twice): a handle that named its task
// twice, once spelled otherwise, was read as no task, and the handle itself was recorded as
// the call's outcome while the task ran on.
func taskHandle(res json.RawMessage) (id string, ttl json.RawMessage, ok bool) {
	if !json.Valid(res) {
		return "", nil, false
	}
	task := jsonrpc.MemberValue(res, "task")
	if task == nil {
		return "", nil, false
	}
	if json.Unmarshal(jsonrpc.MemberValue(task, "taskId"), &id) != nil || id == "" {
		return "", nil, false
	}
	return id, jsonrpc.MemberValue(task, "ttl"), true
}

// How long wrap waits for a task's final result. The server keeps the result for the task's
// ttl from its creation, so none can be fetched later: wrap waits that long and taskGrace
// more. A task without a ttl (null, or none wrap can read) is waited for taskWaitMax. After
// that the outcome is unknown, as if the server had died mid-call: the intent is fenced until
// an operator checks (a task whose tasks/result never returns otherwise held its flight,
// heartbeat and goroutine for as long as the session lived).
var (
	taskGrace   = time.Minute
	taskWaitMax = 7 * 24 * time.Hour
)

// taskWait is how long to wait for the final result of a task whose ttl (as the server
// wrote it, in milliseconds) is ttl.
func taskWait(ttl json.RawMessage) time.Duration {
	var ms *float64
	if json.Unmarshal(ttl, &ms) != nil { // not a number: no ttl
		ms = nil
	}
	return min(ttlMillis(ms, taskWaitMax, taskWaitMax)+taskGrace, taskWaitMax)
}

// ttlMillis is a task's ttl given in milliseconds (ms), in whole milliseconds: absent when
// there is none or it is not positive, at most max (compared as a float, so a huge ttl does
// not overflow a Duration).
func ttlMillis(ms *float64, absent, max time.Duration) time.Duration {
	switch {
	case ms == nil || !(*ms > 0):
		return absent
	case *ms >= float64(max.Milliseconds()):
		return max
	}
	return time.Duration(*ms) * time.Millisecond
}

// runTask is run for a task-augmented call.
func (p *Proxy) runTask(ctx context.Context, tool, intent string, f *flight, t fence.Ticket, carrier string, params json.RawMessage) answer {
	agent := ctx // ends the call while it is not sent yet (see run)
	ctx = context.WithoutCancel(ctx)
	hb := p.heartbeat(t) // renewed while the session is waited for (see run)
	s, err := p.session(ctx)
	if err == nil {
		t, err = p.carry(ctx, t, carrier, s, hb) // as run does
	}
	var res json.RawMessage
	if err == nil {
		p.hide(s, tool, params)
		res, err = p.callBoundedUntil(agent, ctx, s, "tools/call", params)
	}
	if err == nil {
		if a, ok := p.followHandle(ctx, tool, intent, f, t, params, res, s, hb, true); ok {
			return a
		}
	}
	// No task was created (the server answered the call directly, or failed): that answer
	// is the outcome.
	if unknown(err) {
		p.awaitExit(s) // as run does
	}
	hb.stop()
	return p.finish(ctx, tool, intent, f, t, res, err, true, params)
}

// followHandle follows res when it is a task handle, the nested one of MCP 2025-11-25 (whose
// final result tasks/result answers) or the flat one of the tasks extension (followFlat),
// whether or not the call asked for a task: a server may create one all the same, and its
// handle is not the call's outcome. ok is false when res is no handle. Before 2026-12-07 a
// nested handle answered to a call that asked for no task was recorded as the call's result
// (TestUnaskedTaskHandleIsNotTheOutcome). asked says whether the call was task-augmented. A
// nested task beside content answered to a call that asked for none is read as the TypeScript
// SDK's callTool reads it, as a tool result (a CreateTaskResult has no content, a tool result
// always has); to a task-augmented call, as its callToolStream reads it, as a handle
// (TestResultNamingATaskIsAResult). The flat handle says what it is (resultType "task") and is
// followed whatever else it carries.
func (p *Proxy) followHandle(ctx context.Context, tool, intent string, f *flight, t fence.Ticket, params, res json.RawMessage, s Conn, hb *beats, asked bool) (answer, bool) {
	if taskID, ttl, ok := taskHandle(res); ok && (asked || jsonrpc.MemberValue(res, "content") == nil) {
		fetch := func(ctx context.Context) (json.RawMessage, error) { return p.taskResult(ctx, s, taskID) }
		return p.follow(ctx, tool, intent, f, t, params, res, s, taskID, taskWait(ttl), hb, fetch), true
	}
	return p.followFlat(ctx, tool, intent, f, t, params, res, s, hb)
}

// follow hands the agent the handle res of the task taskID, which its call created on s, and,
// on a goroutine of its own, records the task's final result once fetch returns it (the intent
// stays in flight, heartbeated, until then), fetch waiting at most wait.
func (p *Proxy) follow(ctx context.Context, tool, intent string, f *flight, t fence.Ticket, params, res json.RawMessage, s Conn, taskID string, wait time.Duration, hb *beats, fetch func(context.Context) (json.RawMessage, error)) answer {
	p.logf("intent %s runs as task %s; its final result will be recorded", intent, taskID)
	p.calls.Add(1)
	p.tasks.Add(1)
	go func() {
		defer p.calls.Done()
		defer p.tasks.Add(-1)
		hb.hold(fence.Held(p.carrier(s)))
		wctx, cancel := context.WithTimeoutCause(ctx, wait, errTaskWaitOver)
		final, ferr := fetch(wctx)
		cancel()
		if ferr != nil && context.Cause(wctx) == errTaskWaitOver {
			ferr = fmt.Errorf("%w (waited %s)", errTaskWaitOver, wait)
		}
		if unknown(ferr) {
			p.awaitExit(s) // a task in a server whose session ended runs until the process exits
		}
		hb.stop()
		p.finish(ctx, tool, intent, f, t, final, ferr, true, params)
	}()
	return answer{result: res, outcome: "executed", code: "task"}
}

// followFlat follows res when it is the handle of a task of the tasks extension (SEP-2663, MCP
// 2026-07-28): a server that negotiated it may answer any tools/call, task-augmented or not,
// with a CreateTaskResult, flat: resultType "task" and the task's members beside it (taskId,
// status, ttlMs, pollIntervalMs). That task has no tasks/result: its final result (or error)
// comes inline in tasks/get once it is terminal (pollTask). ok is false when res is no such
// handle. Before 2026-12-06 such a handle was taken for the call's result: recorded as its
// outcome, it was replayed to every duplicate, though the task might yet fail (never released
// then) and the server forgets it after its ttl.
func (p *Proxy) followFlat(ctx context.Context, tool, intent string, f *flight, t fence.Ticket, params, res json.RawMessage, s Conn, hb *beats) (answer, bool) {
	if flags := readResult(res); !flags.task || flags.twoWays != "" || !json.Valid(res) {
		return answer{}, false // not a handle, or one read two ways (finish: unknown)
	}
	var taskID string
	if json.Unmarshal(jsonrpc.MemberValue(res, "taskId"), &taskID) != nil || taskID == "" {
		// A handle naming no task: the call created something nobody can follow.
		hb.stop()
		return p.finish(ctx, tool, intent, f, t, nil, errors.New("the server answered with a task handle that names no task"), true, params), true
	}
	ttl := jsonrpc.MemberValue(res, "ttlMs")
	// The server may mark a task failed once its ttl has elapsed, done or not (SEP-2663): a
	// "failed" seen from a second before the ttl ends (as this process counts it, from the
	// handle; the server counts from createdAt, earlier) is no definite failure.
	var failedUnsure time.Time
	var ms *float64
	if json.Unmarshal(ttl, &ms) == nil && ms != nil {
		failedUnsure = time.Now().Add(ttlMillis(ms, 0, taskWaitMax) - time.Second)
	}
	every := pollEvery(res)
	fetch := func(ctx context.Context) (json.RawMessage, error) {
		res, err := p.pollTask(ctx, s, taskID, every, failedUnsure)
		if errors.Is(err, mcpstdio.ErrNotSent) {
			err = fmt.Errorf("%w (%v)", errTaskUnreachable, err) // as taskResult
		}
		return res, err
	}
	return p.follow(ctx, tool, intent, f, t, params, res, s, taskID, taskWait(ttl), hb, fetch), true
}

// How often pollTask asks: the server's pollIntervalMs, within these bounds.
var (
	taskPollMin     = 100 * time.Millisecond
	taskPollDefault = time.Second
	taskPollMax     = time.Minute
)

// pollEvery is the polling interval a task object b suggests, bounded.
func pollEvery(b []byte) time.Duration {
	var ms *float64
	if json.Unmarshal(jsonrpc.MemberValue(b, "pollIntervalMs"), &ms) != nil {
		ms = nil
	}
	return min(max(ttlMillis(ms, taskPollDefault, taskPollMax), taskPollMin), taskPollMax)
}

// pollTask asks tasks/get about a task of the tasks extension until it is terminal, and
// returns its final result: completed, the result inline; failed, the JSON-RPC error inline (a
// definite failure: the extension keeps "failed" for that), unless it came from failedUnsure
// on (a zero time: never), when the ttl may have failed it. Cancelled, a status it does not
// know, an answer it cannot read or a JSON-RPC error from tasks/get leave the outcome unknown.
// An answer lost in transit is asked again as askTaskResult does; the wait (ctx) and the
// session's end end it, unknown.
func (p *Proxy) pollTask(ctx context.Context, s Conn, taskID string, every time.Duration, failedUnsure time.Time) (json.RawMessage, error) {
	var rpc *jsonrpc.Error
	q, _ := json.Marshal(map[string]string{"taskId": taskID})
	delay := every // the handle's suggestion, before the first question too
	var lost reasks
	for {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.agentGone:
			return nil, errors.New("the session is stopping while the task runs")
		}
		asked := time.Now()
		st, err := s.Call(ctx, "tasks/get", q)
		switch {
		case err == nil:
			lost = reasks{}
			if !json.Valid(st) {
				return nil, fmt.Errorf("%w: tasks/get's answer cannot be read", errTaskUnconfirmed)
			}
			raw := jsonrpc.MemberValue(st, "status")
			if len(raw) == 0 || raw[0] != '"' {
				return nil, fmt.Errorf("%w: tasks/get's answer names no status", errTaskUnconfirmed)
			}
			switch status := jsonrpc.Unquote(raw); status {
			case "completed":
				res := jsonrpc.MemberValue(st, "result")
				if len(res) == 0 || res[0] != '{' {
					return nil, fmt.Errorf("%w: tasks/get says completed but gives no result", errTaskUnconfirmed)
				}
				return res, nil
			case "failed":
				if !failedUnsure.IsZero() && !time.Now().Before(failedUnsure) {
					return nil, fmt.Errorf("%w: tasks/get says failed, at the end of the task's ttl, when a server may fail a task whatever it did", errTaskUnconfirmed)
				}
				e := &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task failed"}
				if raw := jsonrpc.MemberValue(st, "error"); len(raw) > 0 && raw[0] == '{' {
					var v struct {
						Code    *int    `json:"code"`
						Message *string `json:"message"`
					}
					if json.Unmarshal(raw, &v) == nil && v.Code != nil && v.Message != nil {
						e = &jsonrpc.Error{Code: *v.Code, Message: *v.Message, Raw: raw}
					}
				}
				return nil, e
			case "cancelled":
				return nil, errTaskCancelled
			case "working", "input_required":
				delay = pollEvery(st)
			default:
				return nil, fmt.Errorf("%w: tasks/get says %q", errTaskUnconfirmed, status)
			}
		case errors.As(err, &rpc):
			return nil, fmt.Errorf("%w: tasks/get answered %q", errTaskUnconfirmed, rpc.Message)
		case errors.Is(err, mcpstdio.ErrNotSent) || ctx.Err() != nil:
			return nil, err
		default:
			var again bool
			if delay, again = lost.again(asked); !again {
				return nil, err
			}
			p.logf("task %s: the answer to tasks/get was lost (%v); asking again in %s", taskID, err, delay)
		}
	}
}

// errTaskCancelled: the task ended cancelled, so whether its effect happened is unknown.
var errTaskCancelled = errors.New("the task was cancelled")

// errTaskUnconfirmed: tasks/result answered an error but the server did not say the task
// failed, so whether its effect happened is unknown.
var errTaskUnconfirmed = errors.New("the task's final result was refused and the server did not say the task failed")

// errTaskWaitOver: the task's final result did not come within its ttl (see taskWait).
var errTaskWaitOver = errors.New("the task's final result did not come within the time the server keeps it")

// errTaskUnreachable: the task exists, but its final result can no longer be asked for.
var errTaskUnreachable = errors.New("the task's final result can no longer be asked for")

// Asking again for a task's final result. tasks/result is a read: asking again runs nothing,
// and the task runs on in the server whatever became of the stream that waited for its
// result. So an answer lost in transit (a stream cut by a load balancer's read timeout, a
// reset, a 5xx: anything but a JSON-RPC answer, the end of the session or the end of the wait)
// is followed by the same question, after taskReaskDelay, doubled each time up to a minute.
// taskReasks such losses in a row end it (unknown); one that came after the stream had been
// open taskStreamUp is a stream cut, not a server failing at once, and starts the count again.
var (
	taskReasks     = 8
	taskReaskDelay = time.Second
	taskStreamUp   = time.Minute
)

// reasks counts the answers to a task's question lost in a row (see taskReasks).
type reasks struct{ n int }

// again is called when the answer to a question asked at asked was lost: whether to ask again,
// and after how long.
func (r *reasks) again(asked time.Time) (time.Duration, bool) {
	if time.Since(asked) >= taskStreamUp {
		r.n = 0 // a stream cut after it was open that long, not a server failing at once
	}
	if r.n++; r.n > taskReasks {
		return 0, false
	}
	return min(taskReaskDelay<<(r.n-1), time.Minute), true
}

// taskResult fetches the final result of a task from the session that created it
// (tasks/result blocks until the task is terminal; it takes no slot of the semaphore, as it
// mostly waits), asking again when the answer is lost in transit (above). A JSON-RPC error is
// the task's own failure only when tasks/get then says the task failed. Otherwise it says
// nothing of the effect, and the outcome is unknown: the task was cancelled, or the server no
// longer knows it (an SDK server drops a task whose ttl lapsed, finished or not), or cannot be
// asked. If that session died, a restarted child knows nothing of the task: the outcome is
// unknown.
//
// The error is never mcpstdio.ErrNotSent: the task was created, so its call was sent. A
// question that cannot reach the server any more (a stdio server that exited, an HTTP server
// that answers 404 to the session after a restart) leaves the outcome unknown. Before
// 2026-12-03 that ErrNotSent reached finish, which released the intent as never sent, and a
// retry ran the call again.
func (p *Proxy) taskResult(ctx context.Context, s Conn, taskID string) (json.RawMessage, error) {
	res, err := p.askTaskResult(ctx, s, taskID)
	if errors.Is(err, mcpstdio.ErrNotSent) {
		err = fmt.Errorf("%w (%v)", errTaskUnreachable, err) // %v: no longer ErrNotSent
	}
	if err == nil && readResult(res).inputRequired {
		// An interim answer (SEP-2322's shape): the task asks for input and runs on once it
		// has it. It is no outcome, and finish would free the intent for it (as for a call
		// answered input_required), so a retry ran the call again while the task lived.
		return nil, fmt.Errorf("%w: tasks/result answered input_required, not the task's final result", errTaskUnconfirmed)
	}
	return res, err
}

func (p *Proxy) askTaskResult(ctx context.Context, s Conn, taskID string) (json.RawMessage, error) {
	q, _ := json.Marshal(map[string]string{"taskId": taskID})
	var res json.RawMessage
	var err error
	var rpc *jsonrpc.Error
	var lost reasks
	for {
		asked := time.Now()
		res, err = s.Call(ctx, "tasks/result", q)
		if err == nil || errors.As(err, &rpc) || errors.Is(err, mcpstdio.ErrNotSent) || ctx.Err() != nil {
			break
		}
		delay, again := lost.again(asked)
		if !again {
			break
		}
		p.logf("task %s: the answer to tasks/result was lost (%v); asking again in %s", taskID, err, delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, err
		case <-p.agentGone: // stopping: the session's end is near, and must not wait for this
			return nil, err
		}
	}
	if err == nil || !errors.As(err, &rpc) {
		return res, err
	}
	st, gerr := s.Call(ctx, "tasks/get", q)
	// The status as MCP's SDKs read it: the member spelled "status", a string. Go's
	// encoding/json also took "Status" (the last of the two when both were given), so a
	// server answering {"status":"working","Status":"failed"} had its running task released
	// as failed, and a retry ran the call again.
	if gerr != nil {
		return nil, fmt.Errorf("%w: tasks/result answered %q and tasks/get failed: %v", errTaskUnconfirmed, rpc.Message, gerr)
	}
	var raw []byte
	if json.Valid(st) {
		raw = jsonrpc.MemberValue(st, "status")
	}
	if len(raw) == 0 || raw[0] != '"' {
		return nil, fmt.Errorf("%w: tasks/result answered %q and tasks/get's answer cannot be read", errTaskUnconfirmed, rpc.Message)
	}
	switch status := jsonrpc.Unquote(raw); status {
	case "failed":
		return nil, err
	case "cancelled":
		return nil, errTaskCancelled
	}
	return nil, fmt.Errorf("%w: tasks/result answered %q while tasks/get says %q", errTaskUnconfirmed, rpc.Message, jsonrpc.Unquote(raw))
}

// Tasks effectfence answers itself. A task-augmented call expects a task handle (a
// CreateTaskResult), but a duplicate answered without running (a replay, the shared answer of
// an attempt it waited for, a refusal) has a plain tool result. It is handed out as a task
// that is already terminal: completed, or failed for an isError result (or, in flight past
// its wait, one that follows the attempt: followFlight). tasks/get and
// tasks/result of its id are answered here (the server never heard of it); tasks/cancel is
// refused as for any terminal task. A proxy keeps the last maxLocalTasks of them, each for its
// ttl (the one the agent asked for, at most a day), their results together at most
// maxLocalTaskBytes (beyond, the oldest go; the newest always stays).

const (
	localTaskPrefix = "effectfence-task-"
	maxLocalTasks   = 1024
	maxLocalTaskTTL = 24 * time.Hour
	relatedTaskMeta = "io.modelcontextprotocol/related-task"
)

// maxLocalTaskBytes bounds the bytes of the results local tasks hold (see asTask).
var maxLocalTaskBytes = 64 << 20

type localTask struct {
	id      string
	status  string
	message string // statusMessage: a failed task's text (failedText)
	created time.Time
	updated time.Time
	ttl     time.Duration
	result  json.RawMessage
	// A task that follows an attempt in flight (followFlight) is working until the attempt
	// ends: done is closed then, and stop ends its follower (its tasks/cancel, its drop).
	done chan struct{}
	stop context.CancelFunc
}

// maxStatusMessage is the most characters of a failed task's text its statusMessage carries.
const maxStatusMessage = 2000

// failedText is the text of a failed task's result for its statusMessage: its text content
// joined, clipped. An SDK client's task stream reports a failed task as "Task … failed" and
// reads no result (the TypeScript SDK's callToolStream), so without it an agent saw nothing
// of a refusal (in flight past --wait, a prior failure and the commands that settle it), where
// the status it reads on the way carries this.
func failedText(res json.RawMessage) string {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(res, &r) != nil {
		return ""
	}
	var parts []string
	for _, c := range r.Content {
		if c.Type == "text" && c.Text != "" {
			parts = append(parts, c.Text)
		}
	}
	return clip(strings.Join(parts, "\n"), maxStatusMessage)
}

type localTasks struct {
	mu    sync.Mutex
	next  int64
	order []string // ids by creation, oldest first (some maybe gone from m already)
	m     map[string]*localTask
	bytes int // the bytes of the results in m
}

// asTask wraps an answer of effectfence's own to a task-augmented call into a terminal task:
// failed for an isError answer, unless it is a replay. A replay answers for a call that ran and
// was recorded done (a failure frees its intent and is never replayed); it is marked isError
// only when the result shown is effectfence's statement for a tool with an output schema (a
// result not kept, a person's confirmation), which SDK clients refuse otherwise. As a failed
// task the TypeScript SDK's callToolStream handed its agent "Task … failed" and never that
// statement: a charge that ran once was reported failed. A completed task whose result is
// marked isError is what the tasks extension (SEP-2663) writes for a tool's own error.
func (p *Proxy) asTask(params json.RawMessage, res json.RawMessage, replayed bool) json.RawMessage {
	var ttl *float64 // the call's "task" and its "ttl", spelled so, as MCP's SDKs read them
	if json.Unmarshal(jsonrpc.MemberValue(jsonrpc.MemberValue(params, "task"), "ttl"), &ttl) != nil {
		ttl = nil
	}
	t := &localTask{status: "completed", created: time.Now().UTC(), ttl: ttlMillis(ttl, 10*time.Minute, maxLocalTaskTTL), result: res}
	t.updated = t.created
	if isError(res) && !replayed {
		t.status, t.message = "failed", failedText(res)
	}
	return p.local.add(t)
}

// add keeps t, a task just made, under an id of its own, and returns its CreateTaskResult.
func (lt *localTasks) add(t *localTask) json.RawMessage {
	lt.mu.Lock()
	if lt.m == nil {
		lt.m = map[string]*localTask{}
	}
	lt.next++
	t.id = localTaskPrefix + strconv.FormatInt(lt.next, 10) + "-" + strconv.FormatInt(t.created.UnixNano(), 36)
	lt.m[t.id] = t
	lt.bytes += len(t.result)
	lt.order = append(lt.order, t.id)
	// The oldest go while there are too many, their results hold too much or they expired
	// (a ttl is at most a day, so one expired behind a live older one goes when that does);
	// the newest, just handed out, stays.
	for len(lt.order) > 1 {
		old := lt.m[lt.order[0]]
		if old != nil && len(lt.m) <= maxLocalTasks && lt.bytes <= maxLocalTaskBytes && t.created.Sub(old.created) <= old.ttl {
			break
		}
		if old != nil {
			lt.drop(old)
		}
		lt.order = lt.order[1:]
	}
	lt.mu.Unlock()
	out, _ := json.Marshal(map[string]any{"task": t.view()})
	return out
}

// drop removes t from m; lt.mu is held.
// A task that follows is dropped as any (the oldest first), and its follower stops.
func (lt *localTasks) drop(t *localTask) {
	delete(lt.m, t.id)
	lt.bytes -= len(t.result)
	if t.stop != nil {
		t.stop()
	}
}

// view is t as tasks/get answers it; lt.mu is held (a following task changes).
func (t *localTask) view() map[string]any {
	v := map[string]any{"taskId": t.id, "status": t.status, "createdAt": t.created.Format(time.RFC3339Nano), "lastUpdatedAt": t.updated.Format(time.RFC3339Nano), "ttl": t.ttl.Milliseconds()}
	if t.status == "working" {
		v["pollInterval"] = followPoll.Milliseconds()
	}
	if t.message != "" {
		v["statusMessage"] = t.message
	}
	return v
}

// followStopped is the statusMessage of a task whose follower ended before the attempt did: its
// proxy is stopping (a cancelled task is cancelled, a dropped one is seen by nobody).
const followStopped = "effectfence: wrap is stopping, and this task no longer follows the identical call in flight. This call was NOT executed; the other call runs on: a retry receives its recorded result once it has one."

// followPoll is the pollInterval a following task suggests, and how often its follower reads
// the ledger (fence.Waited.PollEvery); followPass, how long each of its passes waits at least
// (--wait if longer). An outcome this process records, or one PostgreSQL announces, wakes it at
// once. Before 2026-12-07 each pass waited --wait, reading the ledger as a duplicate's wait
// does (2 ms growing to 100 ms, again at each pass): about 14 reads a second per follower, for
// as long as the attempt ran, and a session may hold 1,024 of them
// (TestFollowerLedgerCost: 1,024 followers at --wait 1s made 14,281 SQLite transactions a
// second; TestFollowerReadsTheLedgerOnceAPoll).
const (
	followPoll = time.Second
	followPass = time.Minute
)

// end makes a working task terminal, once: status, its statusMessage and result. false when it
// was terminal already (cancelled by its agent while its follower ended, say).
func (lt *localTasks) end(t *localTask, status, message string, res json.RawMessage) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if t.status != "working" {
		return false
	}
	t.status, t.message, t.result, t.updated = status, message, res, time.Now().UTC()
	if lt.m[t.id] == t {
		lt.bytes += len(res)
	}
	close(t.done)
	return true
}

// followFlight answers a task-augmented call whose identical attempt was still in flight past
// its wait (first: fencedCall's answer, follow set) with a working task of wrap's own, and
// follows the attempt on a goroutine of its own: it asks the ledger again (fencedCall, each
// pass waiting up to followPass, or --wait if longer, reading the ledger every followPoll and
// woken at once by an outcome this process records or PostgreSQL announces) until the attempt
// ends,
// and the task ends with what the call would have been answered then: completed with the
// recorded result (a replay), failed with the attempt's failure or the refusal of an unknown
// outcome (the text naming what settles it). It never runs the call (followingKey): if the
// attempt ended without an outcome to share, the task fails saying nothing ran. Its agent's
// tasks/cancel ends the follower (the task ends cancelled; the attempt, another call's, runs
// on), and so does the proxy's stop (the task ends failed: its wrap, or HTTP session, is
// stopping) and the task's drop (its ttl, or maxLocalTasks). The task is this proxy's, as
// every task wrap makes (one agent's wrap, one HTTP session): no other session can see it.
func (p *Proxy) followFlight(ctx context.Context, asked json.RawMessage, tool string, id identity, params json.RawMessage, first answer) json.RawMessage {
	var ttl *float64
	if json.Unmarshal(jsonrpc.MemberValue(jsonrpc.MemberValue(asked, "task"), "ttl"), &ttl) != nil {
		ttl = nil
	}
	now := time.Now().UTC()
	t := &localTask{status: "working", created: now, updated: now, ttl: ttlMillis(ttl, 10*time.Minute, maxLocalTaskTTL), done: make(chan struct{})}
	t.message = "effectfence: an identical call is in flight; this task follows it and ends with its outcome. This call is not executed a second time."
	if w, _ := ctx.Value(waitedKey{}).(*fence.Waited); w != nil {
		w.PollEvery(followPoll) // the follower's passes, which alone use it from here on
	}
	fctx, stop := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), followingKey{}, true))
	t.stop = stop
	out := p.local.add(t)
	// Not counted in p.tasks: it holds nothing in the server, so a front may close its session
	// as idle (its agent gone), which stops it (Serving).
	p.calls.Add(1) // inside a request, which holds one: Stop's Wait sees it
	go func() {
		select {
		case <-p.agentGone: // the proxy stops: the follower holds nothing, and ends at once
			stop()
		case <-fctx.Done():
		}
	}()
	go func() {
		defer p.calls.Done()
		defer stop()
		p.logf("intent %s: task %s follows the call in flight (reading the ledger once a second until it ends); nothing runs for it", id.intent, t.id)
		last := first
		for {
			if fctx.Err() != nil {
				p.opt.Engine.Count(last.decision) // the last answer, never counted
				p.local.end(t, "failed", followStopped, last.result)
				p.logf("intent %s: task %s stopped following", id.intent, t.id)
				return
			}
			a := p.fencedCall(fctx, tool, id, params, true)
			switch {
			case a.follow:
				last = a
				continue
			case a.withdrawn:
				// Cancelled (its agent's tasks/cancel, the stop, its drop) while it waited:
				// counted by fencedCall.
				p.local.end(t, "failed", followStopped, last.result)
				p.logf("intent %s: task %s stopped following", id.intent, t.id)
				return
			case a.err != nil:
				p.local.end(t, "failed", clip("effectfence: "+a.err.Message, maxStatusMessage), toolError(a.err.Message, a.code, id.intent))
			case a.code == codeInputRequired:
				// The question of a first round (SEP-2322) is no outcome, and this task no
				// place for it (a client that reads it has no task-augmented calls).
				p.local.end(t, "failed", "effectfence: the identical call this task followed was answered with a question (input_required), which is no outcome. This call was NOT executed; send it again.", toolError("the identical call this task followed was answered with a question (input_required), which is no outcome. This call was NOT executed; send it again.", codeFollowEnded, id.intent))
			case isError(a.result) && a.outcome != "replayed":
				p.local.end(t, "failed", failedText(a.result), a.result)
			default:
				p.local.end(t, "completed", "", a.result)
			}
			p.logf("intent %s: task %s ended (%s)", id.intent, t.id, a.outcome)
			return
		}
	}()
	return out
}

// localTask answers tasks/get, tasks/result and tasks/cancel of a task effectfence made; nil
// when the request is about another task (it goes to the server).
func (p *Proxy) localTask(ctx context.Context, m *jsonrpc.Message) []byte {
	// The task is the params' "taskId", spelled so, as MCP's SDKs read it (the last of that
	// name). Before 2026-12-07 encoding/json read it, which also takes "TaskId" and keeps the
	// last: {"taskId":<the server's task>,"TaskId":<wrap's>} was answered with the result of
	// wrap's task, another call's outcome (TestTaskParamsAreReadAsTheServerReadsThem).
	var id string
	if json.Unmarshal(jsonrpc.MemberValue(m.Params, "taskId"), &id) != nil || !strings.HasPrefix(id, localTaskPrefix) {
		return nil
	}
	lt := &p.local
	lt.mu.Lock()
	t := lt.m[id]
	if t != nil && time.Since(t.created) > t.ttl {
		lt.drop(t)
		t = nil
	}
	lt.mu.Unlock()
	if t == nil {
		// Not always expired: the oldest go past maxLocalTasks (or maxLocalTaskBytes), and a
		// proxy holds only the tasks it handed out (none of a wrap before a restart, nor of
		// another HTTP session). Before 2026-12-06 each was said to have expired.
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidParams, "effectfence wrap: task %q not found: its ttl ended, or it was dropped (wrap keeps its last %d such tasks), or this wrap process (HTTP session) did not hand it out", id, maxLocalTasks))
	}
	switch m.Method {
	case "tasks/get":
		lt.mu.Lock()
		out, _ := json.Marshal(t.view())
		lt.mu.Unlock()
		return jsonrpc.Response(m.ID, out)
	case "tasks/result":
		if t.done != nil {
			// A task that follows: tasks/result waits until it is terminal (MCP). The wait
			// holds nothing: its session may idle out meanwhile (Serving), which ends the task.
			defer p.reading()()
			select {
			case <-t.done:
			case <-ctx.Done():
				return nil // cancelled by the agent: no response
			}
		}
		lt.mu.Lock()
		res := t.result
		lt.mu.Unlock()
		return jsonrpc.Response(m.ID, withRelatedTask(res, t.id))
	case "tasks/cancel":
		if t.done != nil {
			msg := "effectfence: cancelled by its agent: this task no longer follows the identical call in flight, which runs on (it is another call's). This call was NOT executed; a retry receives that call's recorded result once it has one."
			if lt.end(t, "cancelled", msg, toolError(strings.TrimPrefix(msg, "effectfence: "), "cancelled", "")) {
				t.stop()
				lt.mu.Lock()
				out, _ := json.Marshal(t.view())
				lt.mu.Unlock()
				return jsonrpc.Response(m.ID, out)
			}
		}
		lt.mu.Lock()
		status := t.status
		lt.mu.Unlock()
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidParams, "effectfence wrap: task %q is already %s and cannot be cancelled", t.id, status))
	}
	return nil
}

// withRelatedTask adds the related-task mark to a result's _meta. The mark is spliced into the
// result's bytes (at the end of its _meta object, or as a new last member): everything else
// stays byte for byte as recorded. Re-marshalling would re-escape <, > and &, drop spacing and
// reorder members. A mark the server had set (of its own task id) is replaced where it stands,
// so that every parser, first-wins or last-wins, reads this task's id. A result that is not a
// JSON object is returned as it is.
func withRelatedTask(res json.RawMessage, id string) json.RawMessage {
	open := jsonrpc.SkipSpace(res, 0)
	if open == len(res) || res[open] != '{' || !json.Valid(res) {
		return res
	}
	member := `"` + relatedTaskMeta + `":{"taskId":` + string(canon.AppendString(nil, id)) + `}`
	vs, ve, n, closing := jsonrpc.Member(res, "_meta")
	switch {
	case n > 0 && res[vs] == '{':
		meta := res[vs:ve]
		var marks []jsonrpc.Span
		for m := range jsonrpc.Members(meta) {
			if jsonrpc.KeyIs(meta[m.Key:m.KeyEnd], relatedTaskMeta) {
				marks = append(marks, m)
			}
		}
		if len(marks) == 0 {
			return insertMember(res, vs, ve-1, member)
		}
		// The server's own mark (of its task) is replaced, every copy of it: after it, ours
		// would be a second member of that name, and a reader keeping the first would see
		// the task id of another attempt.
		out := slices.Clone(res[:vs])
		at := 0
		for _, m := range marks {
			out = append(append(out, meta[at:m.Key]...), member...)
			at = m.End
		}
		return append(append(out, meta[at:]...), res[ve:]...)
	case n > 0: // a _meta that is not an object becomes one holding the mark
		return slices.Concat(res[:vs], []byte("{"+member+"}"), res[ve:])
	}
	return insertMember(res, open, closing, `"_meta":{`+member+`}`)
}

// insertMember inserts member as the last member of the object whose braces are at lo and hi.
func insertMember(b []byte, lo, hi int, member string) []byte {
	sep := ","
	if jsonrpc.SkipSpace(b, lo+1) == hi {
		sep = ""
	}
	return slices.Concat(b[:hi], []byte(sep+member), b[hi:])
}

// tasksList answers tasks/list: the server's list, with the tasks wrap made for this proxy's
// agent (live ones, oldest first) before the server's on the first page, the one asked for
// without a cursor (or with an empty one). Later pages (a cursor, which only the server hands out) go to the server
// as they are, so its pagination is untouched and each of wrap's tasks is listed once. A server
// that has no tasks/list (method not found) lists none of its own: the first page is wrap's
// alone. Only this proxy's tasks are listed (those of its agent, of its HTTP session): another
// session's tasks/get of them is refused, so listing them there would name what it cannot
// read. Before 2026-12-07 tasks/list went to the server alone, and an agent listing its tasks
// never saw those wrap had handed it.
func (p *Proxy) tasksList(ctx context.Context, m *jsonrpc.Message) []byte {
	// An empty cursor is the first page, as servers read it (server-everything, the SDK's
	// falsy check), not a page of the server's.
	if c := jsonrpc.MemberValue(m.Params, "cursor"); len(c) > 0 && string(c) != "null" && string(c) != `""` {
		return p.forward(ctx, m, "")
	}
	mine := p.local.list()
	if len(mine) == 0 {
		return p.forward(ctx, m, "")
	}
	out := p.forward(ctx, m, "")
	if out == nil {
		return nil // cancelled by the agent
	}
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(out, &resp) != nil {
		return out
	}
	if resp.Error != nil {
		if resp.Error.Code != jsonrpc.CodeMethodNotFound {
			return out // the server's failure, as it said it
		}
		list, _ := json.Marshal(map[string]any{"tasks": mine})
		return jsonrpc.Response(m.ID, list)
	}
	var res map[string]json.RawMessage
	var theirs []json.RawMessage
	if json.Unmarshal(resp.Result, &res) != nil || json.Unmarshal(res["tasks"], &theirs) != nil {
		return out // not a list wrap can read: the server's answer as it is
	}
	all := make([]any, 0, len(mine)+len(theirs))
	for _, v := range mine {
		all = append(all, v)
	}
	for _, v := range theirs {
		all = append(all, v)
	}
	b, _ := json.Marshal(all)
	res["tasks"] = b
	list, _ := json.Marshal(res)
	return jsonrpc.Response(m.ID, list)
}

// list is the views of the live tasks held, oldest first.
func (lt *localTasks) list() []map[string]any {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	var out []map[string]any
	for _, id := range lt.order {
		if t := lt.m[id]; t != nil && time.Since(t.created) <= t.ttl {
			out = append(out, t.view())
		}
	}
	return out
}
