package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestScopeOutlivesAClaudeCodeSession: Claude Code, the client of the README's one-line
// config, sets CLAUDE_CODE_SESSION_ID in the environment of the stdio MCP servers it starts
// (a new id for each session; its docs and changelog, 2.1.154 and 2.1.163), and a `claude`
// started from an IDE's terminal passes on CLAUDE_CODE_SSE_PORT, a port the IDE's extension
// picks again at each restart. Neither says anything about the server or its account. The
// same configuration started by two sessions is the same server: the second session's
// duplicate is replayed from the default ledger, never run again. Before, each session was
// a scope of its own, with a default ledger file of its own: the duplicate ran (a second
// charge), and a call a crash left unknown in one session was not fenced in the next.
func TestScopeOutlivesAClaudeCodeSession(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	state := t.TempDir()
	child := []string{bin, "demo-server", "--latency", "0s", "--effects", effects}
	const session = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"claude-code","version":"2.1.163"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}` + "\n"
	launch := func(sessionID, ssePort string) result {
		t.Helper()
		env := []string{"XDG_STATE_HOME=" + state, store.EnvLedger + "=", "CLAUDECODE=1",
			"CLAUDE_CODE_SESSION_ID=" + sessionID, "CLAUDE_CODE_SSE_PORT=" + ssePort}
		r := runBinary(t, env, session, append([]string{"wrap", "--grace", "60s", "--"}, child...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, `"id":1`) {
			t.Fatalf("wrap in session %s: exit %d\nstdout %s\nstderr %s", sessionID, r.code, r.stdout, r.stderr)
		}
		return r
	}
	executions := func() int { n, _ := os.ReadFile(effects); return strings.Count(string(n), "\n") }

	if first := launch("0f3c1a52-8d1e-4c7b-9a61-3b2f6e1d9c01", "41237"); strings.Contains(first.stdout, "effectfence/replayed") || executions() != 1 {
		t.Fatalf("the first session's charge: %s, %d executions", first.stdout, executions())
	}
	second := launch("7b9e2d44-1f0a-4e3c-8c55-6a7d0b2e4f18", "52911")
	if !strings.Contains(second.stdout, `"effectfence/replayed":true`) || executions() != 1 {
		t.Fatalf("the next Claude Code session's duplicate ran again (%d executions; want 1, replayed):\n%s\nstderr %s", executions(), second.stdout, second.stderr)
	}
	files, _ := filepath.Glob(filepath.Join(state, "effectfence", "wrap-*.db"))
	if len(files) != 1 {
		t.Fatalf("two sessions of one configuration used %d default ledger files, want 1: %v", len(files), files)
	}
}
