package wrap_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// TestExplicitKeyIsKeptAndANewValueIsANewCall is docs/identity.md's "An explicit key": with a
// tool whose schema has an idempotency-key property and key injection on (the default), "a new
// value there is a new call, and wrap never overwrites a value the agent set". Through the
// real wrap binary to a server that records the key it receives: the agent's k-1 reaches the
// server as k-1 and its retry is replayed; k-2 with the same amount is another call and runs
// with k-2; the call without a key runs with the injected one (the intent's hash).
func TestExplicitKeyIsKeptAndANewValueIsANewCall(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	for i, c := range []struct {
		args     string
		replayed bool
	}{
		{`{"amount":5,"idempotency_key":"k-1"}`, false},
		{`{"idempotency_key":"k-1","amount":5}`, true},
		{`{"amount":5,"idempotency_key":"k-2"}`, false},
		{`{"amount":5}`, false},
	} {
		x := call(t, w.Session, "charge", c.args)
		if x.IsError || x.replayed() != c.replayed {
			t.Fatalf("call %d %s: %q (isError %v, replayed %v); want replayed %v", i, c.args, x.text(), x.IsError, x.replayed(), c.replayed)
		}
	}
	effects := mcptest.Effects(r.effects)
	if len(effects) != 3 {
		t.Fatalf("the server ran %q; want 3 charges", effects)
	}
	keys := make([]string, len(effects))
	for i, e := range effects {
		m := regexp.MustCompile(`^charge amount=5 order= key=(\S*)`).FindStringSubmatch(e)
		if m == nil {
			t.Fatalf("effect %q", e)
		}
		keys[i] = m[1]
	}
	if keys[0] != "k-1" || keys[1] != "k-2" || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(keys[2]) {
		t.Fatalf("the server received the keys %q; want the agent's k-1 and k-2 as sent, then an injected hash", strings.Join(keys, ", "))
	}
}

// Under --key the intent is named by the key fields (and effectfence_repeat) alone, so a new
// value of the tool's idempotency-key property with the same key fields is not a new call: it
// is refused with intent_conflict and does not run (docs/identity.md says so); the key
// property named as a key field makes it one.
func TestExplicitKeyUnderAKeyFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key      string
		conflict bool
	}{{"charge:order", true}, {"charge:order,idempotency_key", false}} {
		r := newRig(t)
		w := r.wrap("--key", c.key)
		first := call(t, w.Session, "charge", `{"order":"o-1","amount":5,"idempotency_key":"k-1"}`)
		second := call(t, w.Session, "charge", `{"order":"o-1","amount":5,"idempotency_key":"k-2"}`)
		code := string(second.Meta["effectfence/code"])
		if first.IsError || first.replayed() || second.replayed() || (code == `"intent_conflict"`) != c.conflict || !c.conflict && second.IsError {
			t.Errorf("--key %s: k-1 %q (replayed %v), then k-2 %q (replayed %v, code %s); want k-2 %s", c.key, first.text(), first.replayed(), second.text(), second.replayed(), code,
				map[bool]string{true: "refused with intent_conflict", false: "run"}[c.conflict])
		}
		want := 2
		if c.conflict {
			want = 1
		}
		if n := r.effectCount(); n != want {
			t.Errorf("--key %s: %d executions, want %d", c.key, n, want)
		}
	}
}
