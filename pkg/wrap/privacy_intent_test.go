package wrap_test

import (
	"regexp"
	"testing"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/store"
)

// docs/privacy.md, "What a hash still reveals": under wrap the intent id is a hash of the full
// arguments, redacted ones included, and of the scope; with --scope NAME the scope is known
// to whoever knows the name. wrap's log names an unknown call's intent (and so does an
// on_unknown hook's event): from it and a guess of the redacted value, the value is tested
// offline. The test makes that guess from the log of the real binary.
func TestRedactedValueCanBeTestedAgainstTheIntent(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const card = "4111111111111111"
	w := r.wrap("--scope", "fleet-a", "--redact", "die:tag")
	if x := call(t, w.Session, "die", `{"tag":"`+card+`"}`); !x.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", x)
	}
	w.Close()
	log := w.log.String() // it passes on the server's stderr as it is: only wrap's own lines count
	m := regexp.MustCompile(`intent wrap:die:([0-9a-f]{64})`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("the log names no intent of the call:\n%s", log)
	}
	scope := store.WrapScope(nil, "fleet-a", nil, "").ID
	guess := func(v string) string {
		b, err := canon.Marshal(map[string]any{"args": map[string]any{"tag": v}, "scope": scope, "tool": "die"})
		if err != nil {
			t.Fatal(err)
		}
		return canon.Sum(b)
	}
	if guess("4111111111111112") == m[1] || guess(card) != m[1] {
		t.Fatalf("the intent %s is not the hash of the call with its redacted value and the named scope", m[1])
	}
}
