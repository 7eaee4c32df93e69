package wrap

import (
	"encoding/json"
	"strings"
	"testing"
)

// Promise: a replay is the result the tool returned, byte for byte (docs/identity.md:146,
// docs/DECISIONS-wrap.md:125). tasks/result of a task effectfence made goes through
// withRelatedTask, which re-marshals the result through map[string]json.RawMessage: that
// HTML-escapes <, >, & inside strings, compacts spacing and reorders keys.
func TestWithRelatedTaskKeepsResultBytes(t *testing.T) {
	res := json.RawMessage(`{"content":[{"type":"text","text":"a<b && c>d"}], "isError":false}`)
	out := withRelatedTask(res, localTaskPrefix+"x")
	if !strings.Contains(string(out), `"text":"a<b && c>d"`) {
		t.Fatalf("tool text re-encoded: %s", out)
	}
	if !strings.Contains(string(out), `"}], "isError":false`) {
		t.Fatalf("result spacing/order changed: %s", out)
	}
}
