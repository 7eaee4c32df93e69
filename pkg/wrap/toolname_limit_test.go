package wrap_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// docs/identity.md: an intent is at most 1,024 bytes (fence.MaxIntentLen), so the calls of a
// fenced tool whose name is longer than 954 bytes cannot be fenced: they are answered with a
// tool error (invalid_request) saying they were NOT executed, and never reach the server. A
// name of 954 bytes is fenced and sent (the test server does not know it and says so). An intent
// holds no NUL byte either, so a name with one ("charge\u0000") is refused the same way, and
// the server never reads it as a charge cut short at the NUL.
func TestToolNameBeyondTheIntentLimitIsNotSent(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	ctx := context.Background()
	if _, err := w.CallTool(ctx, strings.Repeat("x", 954), json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Fatalf("a name of 954 bytes must reach the server: %v", err)
	}
	raw, err := w.CallTool(ctx, strings.Repeat("x", 955), json.RawMessage(`{}`))
	if err != nil {
		t.Fatalf("a name of 955 bytes reached the server: %v", err)
	}
	var x result
	if err := json.Unmarshal(raw, &x); err != nil {
		t.Fatal(err)
	}
	if !x.IsError || string(x.Meta["effectfence/code"]) != `"invalid_request"` || !strings.Contains(x.text(), "NOT executed") {
		t.Fatalf("a name of 955 bytes: %s", raw)
	}
	raw, err = w.CallTool(ctx, "charge\x00", json.RawMessage(`{"amount":5}`))
	if err != nil {
		t.Fatalf("a name holding NUL reached the server: %v", err)
	}
	x = result{}
	if err := json.Unmarshal(raw, &x); err != nil {
		t.Fatal(err)
	}
	if !x.IsError || string(x.Meta["effectfence/code"]) != `"invalid_request"` || !strings.Contains(x.text(), "NOT executed") {
		t.Fatalf("a name holding NUL: %s", raw)
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("the server ran %d calls, want none", n)
	}
}
