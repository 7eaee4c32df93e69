//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The gateway's listener keys are the secrets that tell its principals apart: a server it
// runs for one agent's session must not read them (it could then call the gateway as any
// principal, and be replayed their receipts). The keys given inline in EFFECTFENCE_API_KEYS are
// taken out of the environment once read, so no child gets them. The child here writes the
// environment it was given to a file, then execs the demo server.
func TestGatewayChildDoesNotGetTheKeys(t *testing.T) {
	dir := t.TempDir()
	envFile := filepath.Join(dir, "child.env")
	child := `env > "$EF_ENV"; exec "$EF_BIN" demo-server --latency 1ms --effects "$EF_EFFECTS"`
	t.Setenv("EF_ENV", envFile)
	t.Setenv("EF_BIN", effectfence(t))
	t.Setenv("EF_EFFECTS", filepath.Join(dir, "effects"))
	g := startGatewayUnder(t, []string{"env", "EFFECTFENCE_API_KEYS=alice:" + aliceToken},
		"--ledger", filepath.Join(dir, "l.db"), "--listen", "127.0.0.1:0", "--", "sh", "-c", child)
	g.chargeAs(t, "Bearer "+aliceToken)
	env, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatalf("the child wrote no environment: %v", err)
	}
	if !strings.Contains(string(env), "EF_EFFECTS=") {
		t.Fatalf("the child's environment is not what it was given:\n%s", env)
	}
	if strings.Contains(string(env), aliceToken) || strings.Contains(string(env), "EFFECTFENCE_API_KEYS") {
		t.Fatalf("the server of a session was given the gateway's keys:\n%s", env)
	}
}
