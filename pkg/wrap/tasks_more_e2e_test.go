package wrap_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A task whose tasks/result answers an interim input_required result (SEP-2322's shape) has
// not ended: the server says so (tasks/get: "input_required"), and the task runs on once it
// has its input. That answer is no outcome of the task, and no reason to free the intent:
// freed, a retry runs the call a second time while the first task lives. wrap has nothing
// final, so the outcome is unknown and the retry is refused.
func TestTaskAskingForInputIsNotItsOutcome(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t)
	args := `{"tag":"asking","ask_in_task":true}`
	startSlowTask(t, w, args, 60000, "asking-")
	// Once wrap has settled the task's claim (released, before: it is no longer in flight),
	// the retry comes.
	waitSettled(t, r)
	retryIsFenced(t, r, w, args, "a task that asks for input", w)
}

// A handle as the tasks extension writes it (SEP-2663, MCP 2026-07-28: the server may answer
// any tools/call of a client that declared the extension with a task, flat, resultType
// "task", no params.task needed) is not the call's outcome either: the task's final result is
// (docs/wrap.md). Recorded as the outcome, every duplicate was replayed the handle of a task
// that may yet fail, or that the server forgets after its ttl, and a failed task was never
// released. mcptest's flat task completes (tasks/get says so, its result inline): the
// duplicate receives that final result, and the call ran once.
func TestFlatTaskHandleIsNotTheOutcome(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t)
	args := `{"tag":"flat","flat":true}`
	raw, err := w.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"slow","arguments":`+args+`}`))
	if err != nil || !strings.Contains(string(raw), `"resultType":"task"`) || !strings.Contains(string(raw), `"taskId":"flat-`) {
		t.Fatalf("want the server's flat task handle, got %s %v", raw, err)
	}
	var dup result
	waitFor(t, "the duplicate to be answered with the task's final result", func() bool {
		dup = call(t, w.Session, "slow", args)
		return !dup.IsError || string(dup.Meta["effectfence/code"]) != `"in_flight"`
	})
	if dup.IsError || !dup.replayed() || dup.text() != "flat task done" {
		t.Fatalf("the duplicate of a flat task: replayed %v, isError %v, text %q, content %s; wrap log:\n%s", dup.replayed(), dup.IsError, dup.text(), dup.Content, w.log.String())
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("the call ran %d times, want 1", n)
	}
	var states []fence.State
	err = r.openLedger().Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(rec *fence.Record) bool {
			if rec.Tool == "slow" {
				states = append(states, rec.State)
			}
			return true
		})
	})
	if err != nil || len(states) != 1 || states[0] != fence.StateDone {
		t.Fatalf("the flat task's intent in the ledger: %v %v, want one done", states, err)
	}
}

// A flat task (SEP-2663) that failed (tasks/get: "failed", its JSON-RPC error inline) is a
// definite failure: the intent is released and a retry runs. Before, the handle was recorded
// as the call's outcome and every retry was replayed the handle of the failed task.
func TestFailedFlatTaskIsReleased(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t)
	args := `{"tag":"flatfail","flat":true,"rpc":true}`
	raw, err := w.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"slow","arguments":`+args+`}`))
	if err != nil || !strings.Contains(string(raw), `"taskId":"flatfail-`) {
		t.Fatalf("want the server's flat task handle, got %s %v", raw, err)
	}
	waitFor(t, "the retry to run", func() bool {
		x, err := callE(w.Session, "slow", args)
		return err == nil && !x.replayed() && !x.IsError
	})
	if n := r.effectCount(); n != 2 {
		t.Fatalf("%d executions, want the failed task and the retry; wrap log:\n%s", n, w.log.String())
	}
}

// A server may mark a task of the tasks extension failed once its ttl has elapsed, whatever
// the task did (SEP-2663): a "failed" seen at the end of the ttl is no definite failure. The
// outcome is unknown and the retry is refused; released, the retry would run the call again
// though the task may have done its effect.
func TestFlatTaskFailedAtItsTTLIsUnknown(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t)
	args := `{"tag":"flatexpired","flat":true,"rpc":true,"ms":500}`
	raw, err := w.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"slow","arguments":`+args+`}`))
	if err != nil || !strings.Contains(string(raw), `"taskId":"flatfail-`) || !strings.Contains(string(raw), `"ttlMs":500`) {
		t.Fatalf("want the server's flat task handle, got %s %v", raw, err)
	}
	waitSettled(t, r)
	retryIsFenced(t, r, w, args, "a flat task failed at the end of its ttl", w)
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d executions, want the task's alone", n)
	}
}

// The agent's own tasks/result (a pass-through that blocks until its task ends, as MCP's
// SDKs use it) holds a slot of --max-concurrent for the task's whole life. wrap's own
// tasks/result takes none "as it mostly waits"; the agent's does, so an agent following as
// many long tasks as there are slots stalls every other call, fenced ones included. Here one
// slot: with the agent waiting on one stuck task's result, a call of another tool must still
// be answered.
func TestAgentTaskResultDoesNotStarveCalls(t *testing.T) {
	t.Parallel()
	_, w := taskWrap(t, "--max-concurrent", "1")
	res, err := w.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"slow","arguments":{"tag":"starve"},"task":{"ttl":600000}}`))
	var h struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err != nil || json.Unmarshal(res, &h) != nil || !strings.HasPrefix(h.Task.TaskID, "stuck-") {
		t.Fatalf("want the server's task handle, got %s %v", res, err)
	}
	go func() {
		// The agent waits for its task's final result (it never comes: mcptest's stuck task).
		_, _ = w.Call(context.Background(), "tasks/result", json.RawMessage(`{"taskId":"`+h.Task.TaskID+`"}`))
	}()
	waitFor(t, "wrap's and the agent's tasks/result to reach the server", func() bool {
		return strings.Count(w.log.String(), "mcptest: tasks/result") >= 2
	})
	done := make(chan error, 1)
	go func() {
		_, err := callE(w.Session, "echo", `{"text":"hi"}`)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a call of another tool waited 10 s for the slot the agent's tasks/result holds; wrap log:\n%s", w.log.String())
	}
}

// waitSettled waits until wrap has settled the task's claim: none is in flight in r's ledger.
func waitSettled(t *testing.T, r *rig) {
	t.Helper()
	led := r.openLedger()
	waitFor(t, "wrap to settle the task's claim", func() bool {
		inFlight := false
		_ = led.Store().View(context.Background(), func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight}}, func(rec *fence.Record) bool {
				inFlight = true
				return false
			})
		})
		return !inFlight
	})
}

// TestUnaskedTaskHandleIsNotTheOutcome: a server may answer a call that asked for no task with
// a task handle as MCP 2025-11-25 writes it ({"task":{"taskId":…}}, no resultType; or the
// tasks extension's first drafts, resultType "task" beside a nested task). That handle is no
// more the call's outcome than the flat one (TestFlatTaskHandleIsNotTheOutcome): the task's
// final result is, asked for with tasks/result as for a task-augmented call. Before, a handle
// without resultType was recorded as the call's result (done), and every duplicate was
// replayed a handle whose task might yet fail, and which the server forgets after its ttl.
func TestUnaskedTaskHandleIsNotTheOutcome(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t)
	args := `{"tag":"unasked","unasked":true}`
	raw, err := w.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"slow","arguments":`+args+`}`))
	if err != nil || !strings.Contains(string(raw), `"taskId":"unasked-`) {
		t.Fatalf("want the server's task handle, got %s %v", raw, err)
	}
	var dup result
	waitFor(t, "the duplicate to be answered with the task's final result", func() bool {
		dup = call(t, w.Session, "slow", args)
		return !dup.IsError || string(dup.Meta["effectfence/code"]) != `"in_flight"`
	})
	if dup.IsError || !dup.replayed() || dup.text() != "unasked task done" {
		t.Fatalf("the duplicate of a task no one asked for: replayed %v, isError %v, text %q, content %s; wrap log:\n%s", dup.replayed(), dup.IsError, dup.text(), dup.Content, w.log.String())
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("the call ran %d times, want 1", n)
	}
}

// TestResultNamingATaskIsAResult: a tool result, with its content, that also carries a member
// named task naming a task, answered to a call that asked for no task, is the call's result,
// as the TypeScript SDK's callTool reads it (a task handle has no content, a tool result
// always has): recorded and replayed. Taken for a handle, it was followed through
// tasks/result, which a server without tasks refuses, and the call that had completed was
// fenced unknown. Answered to a task-augmented call it is a handle, as the SDK's
// callToolStream reads it (it polls the task): followed, and, the server refusing
// tasks/result, unknown.
func TestResultNamingATaskIsAResult(t *testing.T) {
	t.Parallel()
	r, w := taskWrap(t)
	args := `{"tag":"inline","inline":true}`
	raw, err := w.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"slow","arguments":`+args+`}`))
	if err != nil || !strings.Contains(string(raw), `"done inline"`) {
		t.Fatalf("want the server's result, got %s %v", raw, err)
	}
	if dup := call(t, w.Session, "slow", args); dup.IsError || !dup.replayed() || dup.text() != "done inline" {
		t.Fatalf("the duplicate of a result naming a task: replayed %v, isError %v, text %q, _meta %v; wrap log:\n%s", dup.replayed(), dup.IsError, dup.text(), dup.Meta, w.log.String())
	}
	tasked := `{"tag":"inline-tasked","inline":true}`
	if raw, err := w.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"slow","arguments":`+tasked+`,"task":{"ttl":60000}}`)); err != nil || !strings.Contains(string(raw), `"taskId":"inline-`) {
		t.Fatalf("want the server's answer, got %s %v", raw, err)
	}
	var dup result
	waitFor(t, "the task-augmented call's task to be given up", func() bool {
		dup = call(t, w.Session, "slow", tasked)
		return string(dup.Meta["effectfence/code"]) != `"in_flight"`
	})
	if !dup.IsError || string(dup.Meta["effectfence/code"]) != `"prior_failure"` {
		t.Fatalf("the duplicate of a task-augmented call answered a result naming a task: %+v %q, want prior_failure", dup, dup.text())
	}
	if n := r.effectCount(); n != 2 {
		t.Fatalf("%d executions, want 2 (one per call)", n)
	}
}
