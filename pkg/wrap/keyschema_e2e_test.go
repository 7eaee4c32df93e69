package wrap_test

import (
	"os"
	"os/exec"
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
// used through wrap at all. Now the key goes only where the schema admits it; elsewhere the call
// goes as the agent made it, still fenced: a duplicate is replayed, the effect runs once.
func TestInjectedKeyMeetsTheSchema(t *testing.T) {
	t.Parallel()
	peers, _ := filepath.Abs("../../.peers")
	if _, err := os.Stat(filepath.Join(peers, "node_modules/@modelcontextprotocol/sdk/package.json")); err != nil {
		t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	script, _ := filepath.Abs(filepath.Join("testdata", "keyed_server.mjs"))
	r := newRig(t)
	r.childCmdOverride = []string{"node", script}
	r.extraEnv = []string{"PEERS=" + peers, "EFFECTS=" + r.effects}
	w := r.wrap()
	hash := regexp.MustCompile(`key=[0-9a-f]{64}$`)
	for i, c := range []struct {
		tool     string
		injected bool
	}{{"pay_short_key", false}, {"pay_uuid_key", false}, {"pay_any_key", true}} {
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
		if got := hash.MatchString(eff[i]); got != c.injected {
			t.Fatalf("%s: the server got %q; a key injected: %v, want %v", c.tool, eff[i], got, c.injected)
		}
	}
}
