package wrap_test

import (
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// docs/identity.md: "An intent that is fenced (unknown, failed) stays fenced whatever its
// age: only an operator clears it." The replay window frees a done intent for a new action; a
// call whose outcome is unknown may have taken effect, so the identical call past the window
// (and past a restart of wrap) is still refused, never run again.
func TestUnknownOutlivesTheReplayWindow(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	flags := []string{"--replay-window", "1s"}
	w := r.wrap(flags...)
	if x := call(t, w.Session, "die", `{"tag":"w"}`); !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` {
		t.Fatalf("the call the server died in: %+v", x.text())
	}
	// A done call with the same window, for contrast: past the window it runs again.
	call(t, w.Session, "charge", `{"amount":4}`)
	time.Sleep(1500 * time.Millisecond) // the window must pass; nothing is asserted about speed
	if x := call(t, w.Session, "charge", `{"amount":4}`); x.replayed() || x.IsError {
		t.Fatalf("a done call past the window must run as a new action: %+v", x)
	}
	if x := call(t, w.Session, "die", `{"tag":"w"}`); !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` || !strings.Contains(x.text(), "NOT executed again") {
		t.Fatalf("an unknown call past the window must stay fenced: %+v", x.text())
	}
	w.Close()
	w2 := r.wrap(flags...)
	if x := call(t, w2.Session, "die", `{"tag":"w"}`); !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` {
		t.Fatalf("after a restart, an unknown call past the window must stay fenced: %+v", x.text())
	}
	dies := 0
	for _, e := range mcptest.Effects(r.effects) {
		if strings.HasPrefix(e, "die ") {
			dies++
		}
	}
	if dies != 1 {
		t.Fatalf("the call the server died in ran %d times, want 1", dies)
	}
}
