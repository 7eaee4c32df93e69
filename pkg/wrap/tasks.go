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
// result like any coalesced duplicate and receives it as a plain tool result.

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
// wrote it) is ttl.
func taskWait(ttl json.RawMessage) time.Duration {
	var ms *float64
	_ = json.Unmarshal(ttl, &ms) // not a number: no ttl
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
	stopHeartbeat := p.heartbeat(t).stop // renewed while the session is waited for (see run)
	s, err := p.session(ctx)
	if err == nil {
		t, err = p.carry(ctx, t, carrier, s) // as run does
	}
	var res json.RawMessage
	if err == nil {
		p.hide(s, tool, params)
		res, err = p.callBoundedUntil(agent, ctx, s, "tools/call", params)
	}
	var taskID string
	var ttl json.RawMessage
	ok := false
	if err == nil {
		taskID, ttl, ok = taskHandle(res)
	}
	if !ok {
		// No task was created (the server answered the call directly, or failed): that
		// answer is the outcome.
		if unknown(err) {
			p.awaitExit(s) // as run does
		}
		stopHeartbeat()
		return p.finish(ctx, tool, intent, f, t, res, err, true, params)
	}
	p.logf("intent %s runs as task %s; its final result will be recorded", intent, taskID)
	p.calls.Add(1)
	p.tasks.Add(1)
	go func() {
		defer p.calls.Done()
		defer p.tasks.Add(-1)
		wait, cancel := context.WithTimeoutCause(ctx, taskWait(ttl), errTaskWaitOver)
		final, ferr := p.taskResult(wait, s, taskID)
		cancel()
		if ferr != nil && context.Cause(wait) == errTaskWaitOver {
			ferr = fmt.Errorf("%w (waited %s)", errTaskWaitOver, taskWait(ttl))
		}
		if unknown(ferr) {
			p.awaitExit(s) // a task in a server whose session ended runs until the process exits
		}
		stopHeartbeat()
		p.finish(ctx, tool, intent, f, t, final, ferr, true, params)
	}()
	return answer{result: res, outcome: "executed", code: "task"}
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
	for lost := 0; ; {
		asked := time.Now()
		res, err = s.Call(ctx, "tasks/result", q)
		if err == nil || errors.As(err, &rpc) || errors.Is(err, mcpstdio.ErrNotSent) || ctx.Err() != nil {
			break
		}
		if time.Since(asked) >= taskStreamUp {
			lost = 0
		}
		if lost++; lost > taskReasks {
			break
		}
		delay := min(taskReaskDelay<<(lost-1), time.Minute)
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
// that is already terminal: completed, or failed for an isError result. tasks/get and
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
	created time.Time
	ttl     time.Duration
	result  json.RawMessage
}

type localTasks struct {
	mu    sync.Mutex
	next  int64
	order []string // ids by creation, oldest first (some maybe gone from m already)
	m     map[string]*localTask
	bytes int // the bytes of the results in m
}

// asTask wraps an answer of effectfence's own to a task-augmented call into a terminal task.
func (p *Proxy) asTask(params json.RawMessage, res json.RawMessage) json.RawMessage {
	var q struct {
		Task struct {
			TTL *float64 `json:"ttl"`
		} `json:"task"`
	}
	_ = json.Unmarshal(params, &q)
	t := &localTask{status: "completed", created: time.Now().UTC(), ttl: ttlMillis(q.Task.TTL, 10*time.Minute, maxLocalTaskTTL), result: res}
	if isError(res) {
		t.status = "failed"
	}
	lt := &p.local
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
func (lt *localTasks) drop(t *localTask) {
	delete(lt.m, t.id)
	lt.bytes -= len(t.result)
}

func (t *localTask) view() map[string]any {
	at := t.created.Format(time.RFC3339Nano)
	return map[string]any{"taskId": t.id, "status": t.status, "createdAt": at, "lastUpdatedAt": at, "ttl": t.ttl.Milliseconds()}
}

// localTask answers tasks/get, tasks/result and tasks/cancel of a task effectfence made; nil
// when the request is about another task (it goes to the server).
func (p *Proxy) localTask(m *jsonrpc.Message) []byte {
	var q struct {
		TaskID string `json:"taskId"`
	}
	if json.Unmarshal(m.Params, &q) != nil || !strings.HasPrefix(q.TaskID, localTaskPrefix) {
		return nil
	}
	lt := &p.local
	lt.mu.Lock()
	t := lt.m[q.TaskID]
	if t != nil && time.Since(t.created) > t.ttl {
		lt.drop(t)
		t = nil
	}
	lt.mu.Unlock()
	if t == nil {
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidParams, "effectfence wrap: task %q not found (it expired)", q.TaskID))
	}
	switch m.Method {
	case "tasks/get":
		out, _ := json.Marshal(t.view())
		return jsonrpc.Response(m.ID, out)
	case "tasks/result":
		return jsonrpc.Response(m.ID, withRelatedTask(t.result, t.id))
	case "tasks/cancel":
		return jsonrpc.ErrorResponse(m.ID, rpcErr(jsonrpc.CodeInvalidParams, "effectfence wrap: task %q is already %s and cannot be cancelled", t.id, t.status))
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
