//go:build unix

package wrap_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestConfirmedReplayOfAToolWithAnOutputSchema: a call of a tool with an output schema is cut by
// kill -9 of its wrap, an operator resolves it as happened (`ledger resolve --happened`: the
// recorded result is effectfence's own statement that a person confirmed it, with no
// structuredContent), and the agent's retry comes through the real TypeScript SDK client. That
// client refuses such a tool's result without structuredContent unless it is marked isError
// ("has an output schema but did not return structured content"), so the agent was told that
// instead of the confirmation. The replay of the statement is marked isError for such a tool;
// the tool runs no second time.
func TestConfirmedReplayOfAToolWithAnOutputSchema(t *testing.T) {
	t.Parallel()
	needProc(t)
	peers := needPeers(t)
	script, _ := filepath.Abs(filepath.Join("testdata", "keyed_server.mjs"))
	r := newRig(t)
	r.childCmdOverride = []string{"node", script}
	r.extraEnv = []string{"PEERS=" + peers, "EFFECTS=" + r.effects}
	args := fmt.Sprintf(`{"amount":7,"until":%q}`, filepath.Join(r.dir, "never"))
	w := r.wrap("--lease-secs", "1", "--scope", "confirmed")
	go func() { _, _ = callE(w.Session, "pay_structured", args) }()
	claim := waitForClaim(t, r.openLedger())
	if err := syscall.Kill(w.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	var code int
	var stderr string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		// Refused while the killed wrap's server may still run the call (until it is gone and
		// the lease has lapsed).
		if code, stderr = r.ledgerCmd("resolve", claim.Intent, "--happened", "--ref", "pay_123", "--reason", "seen in the processor"); code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 {
		t.Fatalf("ledger resolve --happened: exit %d: %s", code, stderr)
	}
	a := sdkCalls(t, peers, r.env(), []string{"--scope", "confirmed", "--ledger", r.ledger, "--", "node", script}, "pay_structured", args, 1)[0]
	if a.Error != "" || !a.Replayed || !strings.Contains(a.Text, "confirmed") || !strings.Contains(a.Text, "pay_123") {
		t.Fatalf("the retry, as the SDK client hands it to its agent: %+v", a)
	}
	if !a.IsError {
		t.Fatalf("the confirmation replayed for a tool with an output schema is not marked isError: %+v", a)
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("pay_structured ran %d times; it never finished the first time and the retry must not run it", n)
	}
}
