package wrap_test

import (
	"strings"
	"testing"
)

// TestAnswerTooLongIsUnknown: the server runs a fenced call and answers it with a line longer
// than wrap reads (64 MiB). The call ran, and its result is lost: the agent is told at once
// that the outcome is unknown (before, the call waited until the server died or wrap
// stopped), and a duplicate is refused, not run again.
func TestAnswerTooLongIsUnknown(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	x := call(t, w.Session, "huge", `{}`)
	if !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` || !strings.Contains(x.text(), "NOT be executed again") {
		t.Fatalf("a call answered with a line too long to read: %s (meta %s)", x.text(), x.Meta)
	}
	if again := call(t, w.Session, "huge", `{}`); !again.IsError || string(again.Meta["effectfence/code"]) != `"prior_failure"` {
		t.Fatalf("its duplicate: %s", again.text())
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}
