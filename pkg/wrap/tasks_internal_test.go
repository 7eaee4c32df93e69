package wrap

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// A task effectfence answers itself keeps the ttl the agent asked for, at most a day; a
// hostile ttl (huge, beyond any Duration) neither overflows into an expired task nor is kept.
func TestLocalTaskTTL(t *testing.T) {
	p := &Proxy{}
	res := json.RawMessage(`{"content":[{"type":"text","text":"done"}],"isError":false}`)
	for ttl, want := range map[string]int64{"300000": 300000, "1e30": 86400000, "-5": 600000, `"x"`: 600000} {
		var h struct {
			Task struct {
				TaskID string `json:"taskId"`
				TTL    int64  `json:"ttl"`
			} `json:"task"`
		}
		if err := json.Unmarshal(p.asTask(json.RawMessage(`{"name":"t","task":{"ttl":`+ttl+`}}`), res, false), &h); err != nil || h.Task.TTL != want {
			t.Fatalf("ttl %s: got %d (%v), want %d", ttl, h.Task.TTL, err, want)
		}
		m, _ := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":"` + h.Task.TaskID + `"}}`))
		if out := string(p.localTask(context.Background(), m)); !strings.Contains(out, `"done"`) {
			t.Fatalf("ttl %s: tasks/result of a fresh task: %s", ttl, out)
		}
	}
}

// A task's ttl as the server wrote it bounds the wait for its final result: the ttl and a
// grace, at most taskWaitMax; a ttl that is null, absent, not a number, not positive or
// beyond any Duration waits taskWaitMax.
func TestTaskWait(t *testing.T) {
	for ttl, want := range map[string]time.Duration{
		"300000": 5*time.Minute + taskGrace, "0.5": taskGrace, "null": taskWaitMax, "": taskWaitMax,
		`"x"`: taskWaitMax, "-5": taskWaitMax, "0": taskWaitMax, "1e30": taskWaitMax, "6.048e8": taskWaitMax,
	} {
		if got := taskWait(json.RawMessage(ttl)); got != want {
			t.Errorf("ttl %q: wait %s, want %s", ttl, got, want)
		}
	}
}

// A flat task handle (SEP-2663) is told by its resultType as MCP's SDKs read it, by readResult,
// like input_required: spelled so, escapes decoded. One that a member named resultType but for
// case makes something else to Go's encoding/json is read two ways: not followed as a task,
// and finish records the outcome as unknown.
func TestFlatTaskHandleIsReadAsResultTypeIs(t *testing.T) {
	for res, want := range map[string]resultFlags{
		`{"resultType":"task","taskId":"t1","status":"working"}`:                        {task: true},
		`{"resultType":"t\u0061sk","taskId":"t1","status":"working"}`:                   {task: true},
		`{"content":[],"resultType":"complete","note":"a task"}`:                        {},
		`{"resultType":"task","taskId":"t1","ResultType":"complete"}`:                   {task: true, twoWays: "x"},
		`{"content":[{"type":"text","text":"done"}],"ResultType":"task","taskId":"t1"}`: {twoWays: "x"},
	} {
		got := readResult(json.RawMessage(res))
		if got.task != want.task || (got.twoWays != "") != (want.twoWays != "") {
			t.Errorf("%s: task %v, two ways %q; want task %v, two ways %v", res, got.task, got.twoWays, want.task, want.twoWays != "")
		}
	}
}

// A task effectfence answers itself that it does not hold was not always one that expired: the
// oldest go once there are maxLocalTasks, and a wrap process (an HTTP session) holds only the
// tasks it handed out, none of an earlier process's (wrap restarted) or another session's. The
// answer said "it expired" for all of them.
func TestLocalTaskNotHeldIsNotSaidToHaveExpired(t *testing.T) {
	p := &Proxy{}
	res := json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)
	var first struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err := json.Unmarshal(p.asTask(json.RawMessage(`{"name":"t","task":{"ttl":600000}}`), res, false), &first); err != nil {
		t.Fatal(err)
	}
	for range maxLocalTasks {
		p.asTask(json.RawMessage(`{"name":"t","task":{"ttl":600000}}`), res, false)
	}
	for _, id := range []string{first.Task.TaskID, localTaskPrefix + "1-of-an-earlier-process"} {
		m, _ := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"` + id + `"}}`))
		out := string(p.localTask(context.Background(), m))
		if !strings.Contains(out, "not found") || strings.Contains(out, "(it expired)") || !strings.Contains(out, "did not hand it out") {
			t.Fatalf("tasks/get of %s, a task not held: %s", id, out)
		}
	}
}
