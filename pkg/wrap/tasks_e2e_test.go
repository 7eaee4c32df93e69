package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// Issue 12 item 8: the outcome of a task-augmented call is the task's final result. Against
// server-everything's simulate-research-query (a real task tool, about 4 s): the agent gets
// the task handle and follows the task through wrap (tasks/get, tasks/result pass through);
// wrap records the final result; a duplicate that arrives while the task runs waits and
// receives the final result; a later duplicate receives it too, never a dead handle.
func TestTaskOutcomeIsTheFinalResult(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-everything")
	r := newRig(t)
	r.childCmdOverride = []string{bin}
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	w := r.wrap()
	ctx := context.Background()
	params := json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"fencing tokens"},"task":{"ttl":300000}}`)
	res, err := w.Call(ctx, "tools/call", params)
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
			Status string `json:"status"`
		} `json:"task"`
	}
	if json.Unmarshal(res, &created) != nil || created.Task.TaskID == "" {
		t.Fatalf("want a CreateTaskResult, got %s", res)
	}
	// A duplicate while the task runs: it waits for the final result.
	dup := make(chan result, 1)
	go func() {
		x, err := callE(w.Session, "simulate-research-query", `{"topic":"fencing tokens"}`)
		if err != nil {
			t.Error(err)
		}
		dup <- x
	}()
	// The agent follows its task through wrap.
	q, _ := json.Marshal(map[string]string{"taskId": created.Task.TaskID})
	awaitTaskCompleted(t, w, q, 60*time.Second)
	final, err := w.Call(ctx, "tasks/result", q)
	if err != nil || !strings.Contains(string(final), "Research Report: fencing tokens") {
		t.Fatalf("tasks/result through wrap: %s %v", final, err)
	}
	x := <-dup
	if x.IsError || !strings.Contains(x.text(), "Research Report: fencing tokens") {
		t.Fatalf("the concurrent duplicate did not receive the final result: %+v", x)
	}
	// Later duplicates receive the recorded final result: a plain call as its result, a
	// task-augmented one as a task that is already completed, whose result is that result.
	later1 := call(t, w.Session, "simulate-research-query", `{"topic":"fencing tokens"}`)
	if !later1.replayed() || !strings.Contains(later1.text(), "Research Report: fencing tokens") {
		t.Fatalf("a later plain duplicate: %+v", later1)
	}
	// The server's related-task mark, which its tasks/result answer carries, is replayed as
	// recorded to a plain call (docs/DECISIONS-wrap.md); a task wrap made names itself instead
	// (below).
	if mark := string(later1.Meta["io.modelcontextprotocol/related-task"]); mark != `{"taskId":"`+created.Task.TaskID+`"}` {
		t.Fatalf("a later plain duplicate's related-task mark: %s, want the server's, of task %s", mark, created.Task.TaskID)
	}
	later, err := w.Call(ctx, "tools/call", params)
	var handle struct {
		Task struct {
			TaskID string `json:"taskId"`
			Status string `json:"status"`
			TTL    int64  `json:"ttl"`
		} `json:"task"`
	}
	if err != nil || json.Unmarshal(later, &handle) != nil || handle.Task.Status != "completed" || handle.Task.TaskID == "" || handle.Task.TTL != 300000 {
		t.Fatalf("a later task-augmented duplicate: want a completed task, got %s %v", later, err)
	}
	lq, _ := json.Marshal(map[string]string{"taskId": handle.Task.TaskID})
	if st, err := w.Call(ctx, "tasks/get", lq); err != nil || !strings.Contains(string(st), `"status":"completed"`) {
		t.Fatalf("tasks/get of the completed duplicate: %s %v", st, err)
	}
	res2, err := w.Call(ctx, "tasks/result", lq)
	if err != nil || !strings.Contains(string(res2), "Research Report: fencing tokens") || !strings.Contains(string(res2), `"effectfence/replayed":true`) || !strings.Contains(string(res2), handle.Task.TaskID) {
		t.Fatalf("tasks/result of the completed duplicate: %s %v", res2, err)
	}
	if strings.Contains(string(res2), created.Task.TaskID) {
		t.Fatalf("tasks/result of the completed duplicate names the server's task %s: %s", created.Task.TaskID, res2)
	}
	if _, err := w.Call(ctx, "tasks/cancel", lq); err == nil {
		t.Fatal("a completed task was cancelled")
	}
	if strings.Contains(w.log.String(), "DATA RACE") {
		t.Fatal(w.log.String())
	}
}

// awaitTaskCompleted polls tasks/get through wrap (q is its params) until the task is completed.
func awaitTaskCompleted(t *testing.T, w *wrapProc, q json.RawMessage, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, err := w.Call(context.Background(), "tasks/get", q)
		if err != nil {
			t.Fatalf("tasks/get through wrap: %v", err)
		}
		if strings.Contains(string(st), `"completed"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task never completed: %s", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A task the agent cancels may have done its work before it stopped: its outcome is unknown,
// never "did not run". Against server-everything's simulate-research-query: the agent cancels
// the task through wrap (tasks/cancel passes through); the server's tasks/result then fails
// with a JSON-RPC error and tasks/get says cancelled, so wrap fences the intent. A duplicate
// is refused as not executed again, with the operator's clear command; the intent is unknown
// in the ledger. (Releasing it, as for a task that failed, would let the retry run again.)
func TestCancelledTaskIsUnknown(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-everything")
	r := newRig(t)
	r.childCmdOverride = []string{bin}
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	w := r.wrap()
	ctx := context.Background()
	res, err := w.Call(ctx, "tools/call", json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"cancelled task"},"task":{"ttl":300000}}`))
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if json.Unmarshal(res, &created) != nil || created.Task.TaskID == "" {
		t.Fatalf("want a CreateTaskResult, got %s", res)
	}
	q, _ := json.Marshal(map[string]string{"taskId": created.Task.TaskID})
	if st, err := w.Call(ctx, "tasks/cancel", q); err != nil || !strings.Contains(string(st), `"cancelled"`) {
		t.Fatalf("tasks/cancel through wrap: %s %v", st, err)
	}
	// A duplicate waits for the task's outcome (or finds it recorded) and is refused.
	x := call(t, w.Session, "simulate-research-query", `{"topic":"cancelled task"}`)
	if !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` || !strings.Contains(x.text(), "NOT executed again") || !strings.Contains(x.text(), "ledger clear") {
		t.Fatalf("a duplicate of a cancelled task: %s %s; wrap log:\n%s", x.text(), x.Meta["effectfence/code"], w.log.String())
	}
	// A task-augmented duplicate is refused too, as a task effectfence made that has already
	// failed; its result is the refusal.
	again, err := w.Call(ctx, "tools/call", json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"cancelled task"},"task":{"ttl":60000}}`))
	var handle struct {
		Task struct {
			TaskID string `json:"taskId"`
			Status string `json:"status"`
		} `json:"task"`
	}
	if err != nil || json.Unmarshal(again, &handle) != nil || handle.Task.Status != "failed" || !strings.HasPrefix(handle.Task.TaskID, "effectfence-task-") {
		t.Fatalf("a task-augmented duplicate of a cancelled task: want a failed task of effectfence's own, got %s %v", again, err)
	}
	hq, _ := json.Marshal(map[string]string{"taskId": handle.Task.TaskID})
	if res, err := w.Call(ctx, "tasks/result", hq); err != nil || !strings.Contains(string(res), "NOT executed again") || !strings.Contains(string(res), `"isError":true`) {
		t.Fatalf("tasks/result of the refused duplicate: %s %v", res, err)
	}
	// Its status says why (an SDK's task stream reads the status, and of a failed task
	// nothing else): the refusal's text, in the handle and in tasks/get.
	var st struct {
		Task struct {
			StatusMessage string `json:"statusMessage"`
		} `json:"task"`
		StatusMessage string `json:"statusMessage"`
	}
	if json.Unmarshal(again, &st) != nil || !strings.Contains(st.Task.StatusMessage, "NOT executed again") {
		t.Fatalf("the failed task's handle carries no statusMessage with the refusal: %s", again)
	}
	if got, err := w.Call(ctx, "tasks/get", hq); err != nil || json.Unmarshal(got, &st) != nil || !strings.Contains(st.StatusMessage, "NOT executed again") {
		t.Fatalf("tasks/get of the refused duplicate carries no statusMessage with the refusal: %s %v", got, err)
	}
	var states []fence.State
	err = r.openLedger().Store().View(ctx, func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(rec *fence.Record) bool {
			if rec.Tool == "simulate-research-query" {
				states = append(states, rec.State)
			}
			return true
		})
	})
	if err != nil || len(states) != 1 || states[0] != fence.StateUnknown {
		t.Fatalf("the cancelled task's intent in the ledger: %v %v, want one unknown", states, err)
	}
}

// A task still running when wrap stops has an unknown outcome, like any fenced call still
// inside the server (docs/wrap.md, stopping): the next wrap refuses its retry and does not run
// it again. mcptest's task never ends; when its stdin closes it answers the pending
// tasks/result with a JSON-RPC error, which says nothing of the task itself (it never failed:
// the server is stopping and can no longer be asked for its status).
func TestTaskInFlightAtStopIsUnknown(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t, "--grace", "200ms")
	startSlowTask(t, w, `{"tag":"stop"}`, 600000, "stuck-")
	w.Close()
	retryIsFenced(t, r, r.wrap(), `{"tag":"stop"}`, "a task cut short by a stop", w)
}

// A JSON-RPC error from tasks/result is the task's own failure only when tasks/get says the
// task failed. A server that no longer knows a task it still runs (the TypeScript SDK's
// in-memory store drops a task once its ttl lapses, finished or not) answers both with "Task
// not found": that says nothing of the effect, so the intent is unknown and a retry does not
// run the call a second time.
func TestTaskTheServerForgetsIsUnknown(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t)
	startSlowTask(t, w, `{"tag":"forgot","forget":true}`, 1000, "forgotten-")
	retryIsFenced(t, r, w, `{"tag":"forgot","forget":true}`, "a task the server forgot", w)
}

// A task that failed (tasks/result answers a JSON-RPC error and tasks/get says "failed") is a
// definite failure: the intent is released and a retry runs.
func TestFailedTaskIsReleased(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t)
	startSlowTask(t, w, `{"tag":"failed","rpc":true}`, 1000, "failed-")
	// The retry runs once the failure is settled (a duplicate that arrives first shares it).
	waitFor(t, "the retry to run", func() bool {
		x, err := callE(w.Session, "slow", `{"tag":"failed","rpc":true}`)
		return err == nil && !x.IsError
	})
	if n := r.effectCount(); n != 2 {
		t.Fatalf("%d executions, want the task and the retry; wrap log:\n%s", n, w.log.String())
	}
}

// A handle that names its task twice, "task" as MCP spells it and "Task" (empty, which only a
// case-insensitive reader such as Go's encoding/json takes, the last one winning), is the
// handle of the first as MCP's SDKs read it: here a task that fails, so the intent is
// released and a retry runs. Before, wrap read no task, recorded the handle itself as the
// call's outcome, and every retry was answered with that stale handle.
func TestTaskHandleSpelledTwiceIsReadAsTheSDKsRead(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t)
	args := `{"tag":"twohandles","rpc":true,"two_handles":true}`
	startSlowTask(t, w, args, 1000, "failed-")
	// A retry refused while the failed task's claim is still held (under load, CI 2026-12-06)
	// is answered too, as an error result: only one that ran ends the wait.
	waitFor(t, "the retry to run", func() bool {
		x, err := callE(w.Session, "slow", args)
		return err == nil && !x.IsError
	})
	if n := r.effectCount(); n != 2 {
		t.Fatalf("%d executions, want the failed task and the retry; wrap log:\n%s", n, w.log.String())
	}
}

// A failed-looking task whose tasks/get gives its status twice, "status":"working" as MCP
// spells it and "Status":"failed" (which only a case-insensitive reader such as Go's
// encoding/json takes for the status, the last one winning) has not failed as far as MCP's
// SDKs read it: its outcome is unknown and a retry is fenced. Before, wrap read "failed",
// released the intent, and the retry ran the call again.
func TestTaskStatusSpelledTwoWaysIsUnknown(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t)
	startSlowTask(t, w, `{"tag":"twofaced","rpc":true,"twofaced":true}`, 1000, "twofaced-")
	retryIsFenced(t, r, w, `{"tag":"twofaced","rpc":true,"twofaced":true}`, "a task whose status reads two ways", w)
}

// taskWrap starts wrap (with flags) in front of mcptest for an agent that offers tasks.
func taskWrap(t *testing.T, flags ...string) (*rig, *wrapProc) {
	t.Helper()
	r := newRig(t)
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	return r, r.wrap(flags...)
}

// startSlowTask runs mcptest's slow tool with args as a task of the given ttl and checks that
// the server's handle came back, its id starting with prefix.
func startSlowTask(t *testing.T, w *wrapProc, args string, ttl int, prefix string) {
	t.Helper()
	res, err := w.Call(context.Background(), "tools/call", json.RawMessage(fmt.Sprintf(`{"name":"slow","arguments":%s,"task":{"ttl":%d}}`, args, ttl)))
	if err != nil || !strings.Contains(string(res), `"taskId":"`+prefix) {
		t.Fatalf("want the server's task handle, got %s %v", res, err)
	}
}

// retryIsFenced checks that a retry of the slow call with args, through w, is refused as not
// executed again, and that the call ran once; first's log is shown if not.
func retryIsFenced(t *testing.T, r *rig, w *wrapProc, args, what string, first *wrapProc) {
	t.Helper()
	x := call(t, w.Session, "slow", args)
	if !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` || !strings.Contains(x.text(), "NOT executed again") {
		t.Fatalf("the retry of %s: %s; wrap log:\n%s", what, x.text(), first.log.String())
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("the call ran %d times, want 1", n)
	}
}

// TestTaskKeepResultHash: --keep-result applies to a task-augmented call's final result, the
// outcome wrap records (docs/privacy.md). Against server-everything's simulate-research-query:
// the agent that created the task gets the final result through tasks/result; a duplicate that
// waited while the task ran, a later plain duplicate and a later task-augmented one are told
// it was done and its result not kept, and the report is in none of the ledger's files.
func TestTaskKeepResultHash(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-everything")
	r := newRig(t)
	r.childCmdOverride = []string{bin}
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	w := r.wrap("--keep-result", "simulate-research-query=hash")
	ctx := context.Background()
	params := json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"fencing tokens"},"task":{"ttl":300000}}`)
	res, err := w.Call(ctx, "tools/call", params)
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err != nil || json.Unmarshal(res, &created) != nil || created.Task.TaskID == "" {
		t.Fatalf("want a CreateTaskResult, got %s %v", res, err)
	}
	dup := make(chan result, 1)
	go func() {
		x, err := callE(w.Session, "simulate-research-query", `{"topic":"fencing tokens"}`)
		if err != nil {
			t.Error(err)
		}
		dup <- x
	}()
	q, _ := json.Marshal(map[string]string{"taskId": created.Task.TaskID})
	awaitTaskCompleted(t, w, q, 60*time.Second)
	if final, err := w.Call(ctx, "tasks/result", q); err != nil || !strings.Contains(string(final), "Research Report: fencing tokens") {
		t.Fatalf("tasks/result through wrap: %s %v", final, err)
	}
	notKept := func(what string, x result) {
		t.Helper()
		if x.IsError || !x.replayed() || string(x.Meta["effectfence/result_not_kept"]) != "true" || strings.Contains(x.text(), "Research Report") {
			t.Fatalf("%s: want the not-kept answer, got %+v %s", what, x, x.text())
		}
	}
	notKept("the duplicate that waited", <-dup)
	notKept("a later plain duplicate", call(t, w.Session, "simulate-research-query", `{"topic":"fencing tokens"}`))
	later, err := w.Call(ctx, "tools/call", params)
	var handle struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err != nil || json.Unmarshal(later, &handle) != nil || handle.Task.TaskID == "" {
		t.Fatalf("a later task-augmented duplicate: %s %v", later, err)
	}
	lq, _ := json.Marshal(map[string]string{"taskId": handle.Task.TaskID})
	raw, err := w.Call(ctx, "tasks/result", lq)
	var x result
	if err != nil || json.Unmarshal(raw, &x) != nil {
		t.Fatalf("tasks/result of the later task-augmented duplicate: %s %v", raw, err)
	}
	notKept("a later task-augmented duplicate's tasks/result", x)
	w.Close()
	ledgerFilesLack(t, r, "Research Report")
}
