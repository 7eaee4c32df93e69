package wrap_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// docs/identity.md (the replay window, and "Asking for a deliberate repeat"): an identical
// call past the window runs, and the server receives the key wrap injected into the first
// one (the call's hash), so a service that deduplicates by that key longer than the window
// (Stripe keeps keys for 24 h) answers it from its own record; a deliberate repeat made with
// effectfence_repeat is another call and carries another key.
func TestInjectedKeyPastTheWindowIsTheFirstCallsKey(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--replay-window", "1s")
	call(t, w.Session, "charge", `{"amount":4}`)
	time.Sleep(1500 * time.Millisecond) // the window must pass; nothing is asserted about speed
	if x := call(t, w.Session, "charge", `{"amount":4}`); x.replayed() || x.IsError {
		t.Fatalf("the call past the window must run: %+v", x)
	}
	if x := call(t, w.Session, "charge", `{"amount":4,"effectfence_repeat":"2"}`); x.replayed() || x.IsError {
		t.Fatalf("the deliberate repeat must run: %+v", x)
	}
	eff := mcptest.Effects(r.effects)
	keyOf := regexp.MustCompile(`key=([0-9a-f]{64}) `)
	var keys []string
	for _, e := range eff {
		m := keyOf.FindStringSubmatch(e)
		if m == nil {
			t.Fatalf("an effect without an injected key: %q (all: %q)", e, eff)
		}
		keys = append(keys, m[1])
	}
	if len(keys) != 3 {
		t.Fatalf("want 3 charges, got %q", eff)
	}
	if keys[1] != keys[0] {
		t.Fatalf("the call past the window carried another key than the first (%s, %s): docs/identity.md says it is the same", keys[0], keys[1])
	}
	if keys[2] == keys[0] {
		t.Fatalf("the deliberate repeat carried the first call's key %s: a service deduplicating by it would not run it", keys[0])
	}
}
