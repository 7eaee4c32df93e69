package wrap_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// followRig is two wraps on one ledger, each in front of its own server-everything, for an
// agent that offers tasks and elicitation. simulate-research-query with ambiguous true asks the
// first wrap's agent a question (elicitation/create, through the task's tasks/result, which the
// first wrap reads itself) and stays input_required until the test answers it (answer): the
// first execution outlasts the second wrap's --wait for as long as the test wants, without a
// clock.
type followRig struct {
	*rig
	asked  chan struct{} // closed when the server's question reached the first agent
	answer chan struct{} // close to let the first agent answer it
	first  *wrapProc
	second *wrapProc
}

func newFollowRig(t *testing.T, secondFlags ...string) *followRig {
	t.Helper()
	return newFollowRigWith(t, nil, secondFlags)
}

// newFollowRigWith is newFollowRig with flags for the first wrap too.
func newFollowRigWith(t *testing.T, firstFlags, secondFlags []string) *followRig {
	t.Helper()
	bin := peer(t, "mcp-server-everything")
	fr := &followRig{rig: newRig(t), asked: make(chan struct{}), answer: make(chan struct{})}
	fr.childCmdOverride = []string{bin}
	fr.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{},"elicitation":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	var once sync.Once
	fr.onRequest = func(ctx context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
		if method != "elicitation/create" {
			return json.RawMessage(`{}`), nil
		}
		once.Do(func() { close(fr.asked) })
		select {
		case <-fr.answer:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return json.RawMessage(`{"action":"accept","content":{"interpretation":"technical"}}`), nil
	}
	fr.first = fr.wrap(firstFlags...)
	fr.onRequest = nil // the second agent is never asked
	fr.second = fr.wrap(secondFlags...)
	t.Cleanup(func() {
		select {
		case <-fr.answer:
		default:
			close(fr.answer)
		}
	})
	return fr
}

// taskView is a task as tasks/get, or a CreateTaskResult's task, gives it.
type taskView struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
}

func handleOf(t *testing.T, res json.RawMessage, err error, what string) taskView {
	t.Helper()
	var h struct{ Task taskView }
	if err != nil || json.Unmarshal(res, &h) != nil || h.Task.TaskID == "" {
		t.Fatalf("%s: want a CreateTaskResult, got %s %v", what, res, err)
	}
	return h.Task
}

func taskGet(t *testing.T, w *wrapProc, id string) taskView {
	t.Helper()
	q, _ := json.Marshal(map[string]string{"taskId": id})
	res, err := w.Call(context.Background(), "tasks/get", q)
	var v taskView
	if err != nil || json.Unmarshal(res, &v) != nil {
		t.Fatalf("tasks/get %s: %s %v", id, res, err)
	}
	return v
}

// TestTaskAugmentedDuplicateFollowsTheFlight: a task-augmented duplicate of a task that runs
// longer than its wrap's --wait gets a working task of wrap's own that follows the first
// execution, and that execution's result once it lands, never a failed task while the first
// runs (before, it was failed, "in flight", and an agent took the call for failed). Real
// parts: server-everything's simulate-research-query run as a task behind two wraps on one
// ledger.
func TestTaskAugmentedDuplicateFollowsTheFlight(t *testing.T) {
	t.Parallel()
	fr := newFollowRig(t, "--wait", "1s")
	ctx := context.Background()
	params := json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"quantum","ambiguous":true},"task":{"ttl":300000}}`)
	firstRes, firstErr := fr.first.Call(ctx, "tools/call", params)
	first := handleOf(t, firstRes, firstErr, "the first call")
	if strings.HasPrefix(first.TaskID, "effectfence-task-") {
		t.Fatalf("the first call got a task of wrap's own: %+v", first)
	}
	<-fr.asked // the first execution now waits for its agent's answer, past any --wait
	dupRes, dupErr := fr.second.Call(ctx, "tools/call", params)
	dup := handleOf(t, dupRes, dupErr, "the task-augmented duplicate")
	if !strings.HasPrefix(dup.TaskID, "effectfence-task-") || dup.Status != "working" {
		t.Fatalf("the duplicate of a task in flight past --wait: %+v; want a working task of wrap's own", dup)
	}
	waitFor(t, "the duplicate's follower to start", func() bool {
		return strings.Contains(fr.second.log.String(), "follows the call in flight")
	})
	if v := taskGet(t, fr.second, dup.TaskID); v.Status != "working" {
		t.Fatalf("the duplicate's task while the first runs: %+v", v)
	}
	// The task is the second wrap's agent's alone: the first wrap does not know it.
	dq, _ := json.Marshal(map[string]string{"taskId": dup.TaskID})
	if res, err := fr.first.Call(ctx, "tasks/get", dq); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("another agent's tasks/get of the duplicate's task: %s %v", res, err)
	}
	// tasks/result waits for the outcome.
	q, _ := json.Marshal(map[string]string{"taskId": dup.TaskID})
	got := make(chan string, 1)
	go func() {
		res, err := fr.second.Call(ctx, "tasks/result", q)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(res)
	}()
	close(fr.answer)
	fq, _ := json.Marshal(map[string]string{"taskId": first.TaskID})
	awaitTaskCompleted(t, fr.first, fq, 2*time.Minute)
	var res string
	select {
	case res = <-got:
	case <-time.After(2 * time.Minute):
		t.Fatal("tasks/result of the duplicate's task never returned")
	}
	if !strings.Contains(res, "Research Report: quantum") || !strings.Contains(res, `"effectfence/replayed":true`) || !strings.Contains(res, dup.TaskID) {
		t.Fatalf("tasks/result of the duplicate's task: %s", res)
	}
	if v := taskGet(t, fr.second, dup.TaskID); v.Status != "completed" {
		t.Fatalf("the duplicate's task after the first ended: %+v", v)
	}
	if strings.Contains(fr.second.log.String(), "runs as task") {
		t.Fatalf("the second wrap ran the call:\n%s", fr.second.log.String())
	}
}

// startFollowing starts the first execution (topic names the call) and a task-augmented
// duplicate through the second wrap, which gets a working task of wrap's own; it returns the
// call's params, the first task's id and the duplicate's.
func (fr *followRig) startFollowing(t *testing.T, topic string) (json.RawMessage, string, string) {
	t.Helper()
	ctx := context.Background()
	params := json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"` + topic + `","ambiguous":true},"task":{"ttl":300000}}`)
	firstRes, firstErr := fr.first.Call(ctx, "tools/call", params)
	first := handleOf(t, firstRes, firstErr, "the first call")
	<-fr.asked
	dupRes, dupErr := fr.second.Call(ctx, "tools/call", params)
	dup := handleOf(t, dupRes, dupErr, "the task-augmented duplicate")
	if !strings.HasPrefix(dup.TaskID, "effectfence-task-") || dup.Status != "working" {
		t.Fatalf("the duplicate of a task in flight past --wait: %+v; want a working task of wrap's own", dup)
	}
	return params, first.TaskID, dup.TaskID
}

// awaitTerminal polls tasks/get of id through w until the task is no longer working.
func awaitTerminal(t *testing.T, w *wrapProc, id string) taskView {
	t.Helper()
	var v taskView
	deadline := time.Now().Add(2 * time.Minute)
	for v = taskGet(t, w, id); v.Status == "working" || v.Status == "input_required"; v = taskGet(t, w, id) {
		if time.Now().After(deadline) {
			t.Fatalf("task %s never ended: %+v", id, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return v
}

// TestFollowingTaskEndsAsTheCancelledFirstExecution: the first execution's agent cancels its
// task, so its outcome is unknown (TestCancelledTaskIsUnknown); the duplicate's task that
// followed it ends failed with the refusal a retry gets (NOT executed again, the operator's
// command), never completed and never a second run.
func TestFollowingTaskEndsAsTheCancelledFirstExecution(t *testing.T) {
	t.Parallel()
	fr := newFollowRig(t, "--wait", "1s")
	ctx := context.Background()
	_, firstID, dupID := fr.startFollowing(t, "cancelled first")
	fq, _ := json.Marshal(map[string]string{"taskId": firstID})
	if st, err := fr.first.Call(ctx, "tasks/cancel", fq); err != nil || !strings.Contains(string(st), `"cancelled"`) {
		t.Fatalf("tasks/cancel of the first task: %s %v", st, err)
	}
	v := awaitTerminal(t, fr.second, dupID)
	if v.Status != "failed" || !strings.Contains(v.StatusMessage, "NOT executed again") || !strings.Contains(v.StatusMessage, "ledger clear") {
		t.Fatalf("the duplicate's task after the first was cancelled: %+v; wrap log:\n%s", v, fr.second.log.String())
	}
	dq, _ := json.Marshal(map[string]string{"taskId": dupID})
	if res, err := fr.second.Call(ctx, "tasks/result", dq); err != nil || !strings.Contains(string(res), "NOT executed again") || !strings.Contains(string(res), `"isError":true`) {
		t.Fatalf("tasks/result of the duplicate's task: %s %v", res, err)
	}
	if strings.Contains(fr.second.log.String(), "runs as task") {
		t.Fatalf("the second wrap ran the call:\n%s", fr.second.log.String())
	}
}

// TestCancelledFollowingTaskLeavesTheFirstExecution: the duplicate's agent cancels the task
// that follows: it ends cancelled, saying nothing ran for it, and the first execution, another
// call's, runs on and is recorded; a later duplicate gets its result.
func TestCancelledFollowingTaskLeavesTheFirstExecution(t *testing.T) {
	t.Parallel()
	fr := newFollowRig(t, "--wait", "1s")
	ctx := context.Background()
	params, firstID, dupID := fr.startFollowing(t, "cancelled follower")
	dq, _ := json.Marshal(map[string]string{"taskId": dupID})
	st, err := fr.second.Call(ctx, "tasks/cancel", dq)
	var v taskView
	if err != nil || json.Unmarshal(st, &v) != nil || v.Status != "cancelled" || !strings.Contains(v.StatusMessage, "NOT executed") {
		t.Fatalf("tasks/cancel of the following task: %s %v", st, err)
	}
	if _, err := fr.second.Call(ctx, "tasks/cancel", dq); err == nil {
		t.Fatal("a cancelled task was cancelled again")
	}
	close(fr.answer)
	fq, _ := json.Marshal(map[string]string{"taskId": firstID})
	awaitTaskCompleted(t, fr.first, fq, 2*time.Minute)
	if v := taskGet(t, fr.second, dupID); v.Status != "cancelled" {
		t.Fatalf("the cancelled task after the first ended: %+v", v)
	}
	waitFor(t, "the follower to end", func() bool {
		return strings.Contains(fr.second.log.String(), "stopped following")
	})
	waitSettled(t, fr.rig) // the first wrap has recorded the final result it fetched
	laterRes, laterErr := fr.second.Call(ctx, "tools/call", params)
	if later := handleOf(t, laterRes, laterErr, "a later duplicate"); later.Status != "completed" {
		t.Fatalf("a later duplicate: %+v", later)
	}
	if strings.Contains(fr.second.log.String(), "runs as task") {
		t.Fatalf("the second wrap ran the call:\n%s", fr.second.log.String())
	}
}

// TestTasksListNamesWrapsOwnTasks: tasks/list through a wrap lists the tasks wrap handed its
// agent (a following task, a completed one) beside the server's, on the first page, and
// another agent's wrap lists none of them. Before, tasks/list went to the server alone and an
// agent never saw wrap's tasks in it.
func TestTasksListNamesWrapsOwnTasks(t *testing.T) {
	t.Parallel()
	fr := newFollowRig(t, "--wait", "1s")
	ctx := context.Background()
	_, firstID, dupID := fr.startFollowing(t, "listed")
	list := func(w *wrapProc) string {
		t.Helper()
		res, err := w.Call(ctx, "tasks/list", json.RawMessage(`{}`))
		if err != nil {
			t.Fatalf("tasks/list: %v", err)
		}
		return string(res)
	}
	if l := list(fr.second); !strings.Contains(l, `"taskId":"`+dupID+`"`) || !strings.Contains(l, `"status":"working"`) {
		t.Fatalf("tasks/list through the wrap whose agent has a following task: %s", l)
	}
	// An empty cursor asks for the first page, as server-everything reads it: wrap's tasks are
	// on it too (before 2026-12-07 it was taken for a cursor and they were left out).
	if res, err := fr.second.Call(ctx, "tasks/list", json.RawMessage(`{"cursor":""}`)); err != nil || !strings.Contains(string(res), `"taskId":"`+dupID+`"`) {
		t.Fatalf("tasks/list with an empty cursor: %s %v; want the following task listed", res, err)
	}
	if l := list(fr.first); !strings.Contains(l, firstID) || strings.Contains(l, dupID) {
		t.Fatalf("tasks/list through the first wrap: %s; want the server's task %s and not the other agent's %s", l, firstID, dupID)
	}
	close(fr.answer)
	if v := awaitTerminal(t, fr.second, dupID); v.Status != "completed" {
		t.Fatalf("the following task: %+v", v)
	}
	if l := list(fr.second); !strings.Contains(l, `"taskId":"`+dupID+`"`) || !strings.Contains(l, `"status":"completed"`) {
		t.Fatalf("tasks/list after the task completed: %s", l)
	}
}

// TestSDKTaskFollowsTheFlight: the real TypeScript SDK client's task-augmented call
// (callToolStream), a duplicate of a task in flight past its wrap's --wait, is handed the first
// execution's result, having seen its task working on the way; before, the SDK handed its agent
// "Task … failed" while the first execution ran on.
func TestSDKTaskFollowsTheFlight(t *testing.T) {
	t.Parallel()
	peers := needPeers(t, "node_modules/.bin/mcp-server-everything")
	// One scope for both wraps: the SDK client's wrap runs with another environment.
	fr := newFollowRigWith(t, []string{"--scope", "sdk-follow"}, nil)
	ctx := context.Background()
	params := json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"sdk follower","ambiguous":true},"task":{"ttl":300000}}`)
	firstRes, firstErr := fr.first.Call(ctx, "tools/call", params)
	first := handleOf(t, firstRes, firstErr, "the first call")
	<-fr.asked
	nctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	wa, _ := json.Marshal([]string{"--scope", "sdk-follow", "--wait", "1s", "--", filepath.Join(peers, "node_modules/.bin/mcp-server-everything")})
	node := exec.CommandContext(nctx, "node", filepath.Join("testdata", "follow_client.mjs"))
	node.Env = append(append(os.Environ(), fr.env()...), "PEERS="+peers, "EF_BIN="+efBin, "WRAP_ARGS="+string(wa),
		"TOOL=simulate-research-query", `TOOL_ARGS={"topic":"sdk follower","ambiguous":true}`)
	var stderr logBuf
	node.Stderr = &stderr
	var out []byte
	var nodeErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, nodeErr = node.Output()
	}()
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(stderr.String(), "follows the call in flight"); time.Sleep(20 * time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("the SDK client ended before its task followed the first execution: %s %v\n%s", out, nodeErr, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SDK client's task never followed the first execution:\n%s", stderr.String())
		}
	}
	close(fr.answer)
	fq, _ := json.Marshal(map[string]string{"taskId": first.TaskID})
	awaitTaskCompleted(t, fr.first, fq, 2*time.Minute)
	<-done
	if nodeErr != nil {
		t.Fatalf("node client: %v\n%s", nodeErr, stderr.String())
	}
	var rep struct {
		Statuses []string
		TaskID   string
		Text     string
		Replayed bool
		Error    *string
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report %s: %v", out, err)
	}
	if rep.Error != nil || !strings.HasPrefix(rep.TaskID, "effectfence-task-") || len(rep.Statuses) == 0 || rep.Statuses[0] != "working" || !rep.Replayed || !strings.Contains(rep.Text, "Research Report: sdk follower") {
		t.Fatalf("what the SDK handed its agent: %s\n%s", out, stderr.String())
	}
	if strings.Contains(stderr.String(), "runs as task") {
		t.Fatalf("the SDK client's wrap ran the call:\n%s", stderr.String())
	}
}
