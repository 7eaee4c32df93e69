package wrap_test

import (
	"testing"
	"time"
)

// docs/policy.md: a tool the server adds later (tools/list_changed) gets its glob's entry too.
// "ext*" says fence: false, so the added tool "extra" passes through: its identical second
// call runs rather than being replayed.
func TestPolicyGlobAppliesToAToolAddedLater(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--policy", writePolicy(t, r, "version: 1\ntools:\n  \"ext*\":\n    fence: false\n"))
	call(t, w.Session, "add_tool", `{}`)
	select {
	case <-w.notes:
	case <-time.After(time.Minute):
		t.Fatal("list_changed not forwarded")
	}
	for i := range 2 {
		if x := call(t, w.Session, "extra", `{}`); x.IsError || x.replayed() || x.text() != "extra ran" {
			t.Fatalf("call %d of the added tool, which the policy passes through: %+v", i, x)
		}
	}
}
