package wrap

import (
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
		if out := string(p.localTask(m)); !strings.Contains(out, `"done"`) {
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
