package wrap_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// docs/policy.md: `elicit: false` means nobody is asked through MCP elicitation about an
// unknown outcome of that tool; only the operator decides. The same client, which declares
// elicitation, is asked about the same unknown call of a tool without the setting (declining
// leaves it fenced), so the difference is the policy's.
func TestPolicyElicitFalseAsksNobody(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		policy string
		asked  bool
	}{
		{"elicit false", "version: 1\ntools:\n  die:\n    elicit: false\n", false},
		{"default", "version: 1\ntools:\n  charge:\n    elicit: false\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			r.init = json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
			var mu sync.Mutex
			var asked []string
			r.onRequest = func(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
				mu.Lock()
				asked = append(asked, method+" "+string(params))
				mu.Unlock()
				return json.RawMessage(`{"action":"decline"}`), nil
			}
			w := r.wrap("--policy", writePolicy(t, r, c.policy))
			if x := call(t, w.Session, "die", `{"tag":"e"}`); !x.IsError {
				t.Fatalf("the call the server died in: %+v", x.text())
			}
			again := call(t, w.Session, "die", `{"tag":"e"}`)
			if !again.IsError || string(again.Meta["effectfence/code"]) != `"prior_failure"` || !strings.Contains(again.text(), "NOT executed again") {
				t.Fatalf("the retry of an unknown call must stay fenced: %+v", again.text())
			}
			mu.Lock()
			defer mu.Unlock()
			elicited := 0
			for _, a := range asked {
				if strings.HasPrefix(a, "elicitation/create ") {
					elicited++
				}
			}
			if c.asked && elicited == 0 {
				t.Fatalf("the client declaring elicitation was never asked (requests: %q)", asked)
			}
			if !c.asked && elicited != 0 {
				t.Fatalf("elicit: false, yet the client was asked: %q", asked)
			}
			if n := r.effectCount(); n != 1 {
				t.Fatalf("die ran %d times, want 1", n)
			}
		})
	}
}
