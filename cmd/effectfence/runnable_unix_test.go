//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWrapOfAScriptWhoseInterpreterIsMissing: a server command that is a script whose #!
// line names an interpreter that is not there (a console script of a virtual environment
// since removed: `#!/home/me/.venv/bin/python`) cannot run, and is refused as one, like a
// missing command: exit 2, nothing on stdout, no ledger created (README's exit codes, and
// docs/wrap.md). Before, exec.LookPath found the script, wrap created its ledger and served,
// and only the agent's initialize said "fork/exec …: no such file or directory"; probe and
// policy init exited 1. So is a script whose interpreter is such a script. A script whose
// interpreter runs is started as before.
func TestWrapOfAScriptWhoseInterpreterIsMissing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := write("mcp-server", "#!"+filepath.Join(dir, "venv-gone", "bin", "python")+"\nprint('hi')\n")
	nested := write("mcp-server-2", "#! "+missing+" -u\n")
	runs := write("mcp-server-sh", "#!/bin/sh\nexit 0\n")
	init := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n"

	for _, cmd := range []string{missing, nested} {
		state := t.TempDir()
		env := []string{"XDG_STATE_HOME=" + state, "EFFECTFENCE_LEDGER="}
		r := runBinary(t, env, init, "wrap", "--", cmd)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "cannot run the MCP server command") ||
			!strings.Contains(r.stderr, "venv-gone") || !strings.Contains(r.stderr, "no ledger was created") {
			t.Errorf("wrap -- %s: exit %d, stdout %q, stderr %q", cmd, r.code, r.stdout, r.stderr)
		}
		if entries, err := os.ReadDir(state); err != nil || len(entries) != 0 {
			t.Errorf("wrap -- %s: the state directory holds %v (%v); want nothing created", cmd, entries, err)
		}
		r = runBinary(t, env, "", "probe", "--tool", "t", "--args", "{}", "--", cmd)
		if r.code != exitUsage || !strings.Contains(r.stderr, "venv-gone") {
			t.Errorf("probe -- %s: exit %d, stderr %q", cmd, r.code, r.stderr)
		}
		r = runBinary(t, env, "", "policy", "init", "--", cmd)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "venv-gone") {
			t.Errorf("policy init -- %s: exit %d, stdout %q, stderr %q", cmd, r.code, r.stdout, r.stderr)
		}
	}

	// The control: an interpreter that is there. wrap starts (the agent sends nothing) and
	// opens its ledger.
	state := t.TempDir()
	r := runBinary(t, []string{"XDG_STATE_HOME=" + state, "EFFECTFENCE_LEDGER="}, "", "wrap", "--", runs)
	if r.code != exitOK || !strings.Contains(r.stderr, "effectfence since boot: admitted=0") {
		t.Fatalf("wrap -- %s: exit %d, stderr %q", runs, r.code, r.stderr)
	}
}
