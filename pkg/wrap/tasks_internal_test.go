package wrap

import (
	"encoding/json"
	"strings"
	"testing"

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
		if err := json.Unmarshal(p.asTask(json.RawMessage(`{"name":"t","task":{"ttl":`+ttl+`}}`), res), &h); err != nil || h.Task.TTL != want {
			t.Fatalf("ttl %s: got %d (%v), want %d", ttl, h.Task.TTL, err, want)
		}
		m, _ := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":"` + h.Task.TaskID + `"}}`))
		if out := string(p.localTask(m)); !strings.Contains(out, `"done"`) {
			t.Fatalf("ttl %s: tasks/result of a fresh task: %s", ttl, out)
		}
	}
}
