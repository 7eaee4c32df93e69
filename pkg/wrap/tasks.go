package wrap

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
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
//     child or a cancelled task leaves the outcome unknown.
//
// A duplicate, task-augmented or not, that arrives while the task runs waits for the final
// result like any coalesced duplicate and receives it as a plain tool result.

type createTaskResult struct {
	Task *struct {
		TaskID string `json:"taskId"`
		Status string `json:"status"`
	} `json:"task"`
}

// runTask is run for a task-augmented call.
func (p *Proxy) runTask(ctx context.Context, tool, intent string, f *flight, t fence.Ticket, params json.RawMessage) answer {
	ctx = context.WithoutCancel(ctx)
	stopHeartbeat := p.heartbeat(t)
	s, err := p.session(ctx)
	var res json.RawMessage
	if err == nil {
		res, err = p.callBounded(ctx, s, "tools/call", params)
	}
	var handle createTaskResult
	if err != nil || json.Unmarshal(res, &handle) != nil || handle.Task == nil || handle.Task.TaskID == "" {
		// No task was created (the server answered the call directly, or failed): that
		// answer is the outcome.
		stopHeartbeat()
		return p.finish(ctx, tool, intent, f, t, res, err, true)
	}
	p.logf("intent %s runs as task %s; its final result will be recorded", intent, handle.Task.TaskID)
	p.calls.Add(1)
	go func() {
		defer p.calls.Done()
		final, ferr := taskResult(ctx, s, handle.Task.TaskID)
		stopHeartbeat()
		p.finish(ctx, tool, intent, f, t, final, ferr, true)
	}()
	return answer{result: res, outcome: "executed", code: "task"}
}

// errTaskCancelled: the task ended cancelled, so whether its effect happened is unknown.
var errTaskCancelled = errors.New("the task was cancelled")

// taskResult fetches the final result of a task from the session that created it
// (tasks/result blocks until the task is terminal; it takes no slot of the semaphore, as it
// mostly waits). A JSON-RPC error is the task's own failure, unless tasks/get says the task
// was cancelled. If that session died, a restarted child knows nothing of the task: the
// error is a transport error and the outcome unknown.
func taskResult(ctx context.Context, s Conn, taskID string) (json.RawMessage, error) {
	q, _ := json.Marshal(map[string]string{"taskId": taskID})
	res, err := s.Call(ctx, "tasks/result", q)
	var rpc *jsonrpc.Error
	if err == nil || !errors.As(err, &rpc) {
		return res, err
	}
	if st, gerr := s.Call(ctx, "tasks/get", q); gerr == nil {
		var g struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(st, &g) == nil && g.Status == "cancelled" {
			return nil, errTaskCancelled
		}
	}
	return nil, err
}
