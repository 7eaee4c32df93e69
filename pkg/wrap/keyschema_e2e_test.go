package wrap_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// TestInjectedKeyMeetsTheSchema holds docs/wrap.md's key injection ("so the downstream service
// dedupes too") against a real TypeScript SDK server, which checks a call's arguments against
// the tool's input schema before the tool runs. Before, wrap filled an idempotency key the
// agent left out with the intent's 64-digit hash whatever the property's schema said: a tool
// whose key is at most 45 characters (as Square's API has) or a UUID refused every such call
// ("Input validation error"), a tool error that released the intent, so the tool could not be
// used through wrap at all. Now the key takes the form the schema admits: the hash's first 45
// digits, or a UUID made of them (so the service still dedupes), and the call is fenced as
// before: a duplicate is replayed, the effect runs once.
func TestInjectedKeyMeetsTheSchema(t *testing.T) {
	t.Parallel()
	r := nodeServerRig(t, "keyed_server.mjs")
	w := r.wrap()
	for i, c := range []struct {
		tool string
		key  *regexp.Regexp // the key the server gets: the hash's first digits, as a UUID, whole
	}{
		{"pay_short_key", regexp.MustCompile(`key=[0-9a-f]{45}$`)},
		{"pay_uuid_key", regexp.MustCompile(`key=[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)},
		{"pay_any_key", regexp.MustCompile(`key=[0-9a-f]{64}$`)},
	} {
		first := call(t, w.Session, c.tool, `{"amount":5}`)
		if first.IsError || first.replayed() {
			t.Fatalf("%s {\"amount\":5} through wrap: isError %v, replayed %v: %s", c.tool, first.IsError, first.replayed(), first.text())
		}
		again := call(t, w.Session, c.tool, `{"amount":5}`)
		if !again.replayed() || again.text() != first.text() {
			t.Fatalf("%s: the duplicate was not replayed the first's result: replayed %v: %s", c.tool, again.replayed(), again.text())
		}
		eff := mcptest.Effects(r.effects)
		if len(eff) != i+1 || !strings.HasPrefix(eff[i], c.tool+" amount=5 ") {
			t.Fatalf("%s: effects %q, want one more, of %s", c.tool, eff, c.tool)
		}
		if !c.key.MatchString(eff[i]) {
			t.Fatalf("%s: the server got %q, want a key matching %s", c.tool, eff[i], c.key)
		}
	}
}

// nodeServerRig is a rig whose child is the Node script testdata/name, a server on MCP's
// TypeScript SDK from the peers (PEERS), writing its effects where the rig counts them
// (EFFECTS). It skips the test when the peers are not installed.
func nodeServerRig(t *testing.T, name string) *rig {
	t.Helper()
	peers := needPeers(t)
	script, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t)
	r.childCmdOverride = []string{"node", script}
	r.extraEnv = []string{"PEERS=" + peers, "EFFECTS=" + r.effects}
	return r
}
