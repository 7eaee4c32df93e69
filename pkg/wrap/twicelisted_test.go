package wrap_test

import (
	"context"
	"testing"
)

// A server that lists one tool twice, once as it may write and once annotated readOnlyHint
// (a tool registered twice, a listing merged from two sources), leaves it unclear which entry
// an agent reads. wrap kept the last entry it read, so the tool passed through unfenced and an
// identical second call ran again. A tool is read-only to wrap only when every entry of it
// says so; otherwise it is fenced: run once, then replayed. Whether wrap lists the tools
// itself (the first call) or the agent does, the same.
func TestToolListedTwiceIsFencedUnlessEveryEntryIsReadOnly(t *testing.T) {
	t.Parallel()
	for _, agentLists := range []bool{false, true} {
		r := newRig(t)
		r.mode = "twicelisted"
		w := r.wrap()
		if agentLists {
			if _, err := w.ListTools(context.Background(), ""); err != nil {
				t.Fatal(err)
			}
		}
		first := call(t, w.Session, "unlisted", `{"tag":"twice"}`)
		again := call(t, w.Session, "unlisted", `{"tag":"twice"}`)
		if first.IsError || first.replayed() || again.IsError || !again.replayed() {
			t.Fatalf("agent lists %v: unlisted: %q then %q (replayed %v); want it run once, then replayed", agentLists, first.text(), again.text(), again.replayed())
		}
		if n := r.effectCount(); n != 1 {
			t.Fatalf("agent lists %v: the tool ran %d times, want 1", agentLists, n)
		}
	}
}
