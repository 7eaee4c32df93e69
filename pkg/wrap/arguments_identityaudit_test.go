package wrap_test

import (
	"context"
	"encoding/json"
	"testing"
)

// TestNullAbsentAndEmptyArgumentsAreOneCall is docs/identity.md's "`arguments` … (`null`, like
// no `arguments` at all, is taken as `{}`, one call with them": through the real wrap binary,
// a call with "arguments":null, its retry without arguments and its retry with {} (each a new
// JSON-RPC id) (the test server's meta tool, which records one effect a call) run once; the two retries are answered with the first one's receipt.
func TestNullAbsentAndEmptyArgumentsAreOneCall(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	for i, params := range []string{
		`{"name":"meta","arguments":null}`,
		`{"name":"meta"}`,
		`{"name":"meta","arguments":{}}`,
	} {
		raw, err := w.Call(context.Background(), "tools/call", json.RawMessage(params))
		var x result
		if err != nil || json.Unmarshal(raw, &x) != nil || x.IsError || x.replayed() != (i > 0) {
			t.Fatalf("%s: %s %v (replayed %v); want it %s", params, raw, err, x.replayed(), map[bool]string{false: "run", true: "replayed"}[i > 0])
		}
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}
