package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestScopeOutlivesADesktopLaunch: an MCP client started as a desktop application passes on
// what its launcher set for that launch alone. On macOS launchd gives every process it
// launches a LaunchInstanceID (a new UUID each time: Terminal, VS Code, Claude Desktop), and
// LaunchServices names an application it opens in XPC_SERVICE_NAME with numbers of that
// launch ("application.com.microsoft.VSCode.59852660.59852666"); GNOME's launcher sets
// GIO_LAUNCHED_DESKTOP_FILE_PID to the pid of the application it starts from a .desktop file.
// A client that passes its environment to its servers (Claude Code run in Terminal or in an
// IDE's terminal) hands them on, and the next launch of the client is the same
// configuration: its duplicate is replayed from the default ledger, never run again. Before,
// each launch was a scope of its own, with a default ledger file of its own: the duplicate
// ran (a second charge), and a call a crash left unknown in one launch was not fenced in the
// next.
func TestScopeOutlivesADesktopLaunch(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	state := t.TempDir()
	child := []string{bin, "demo-server", "--latency", "0s", "--effects", effects}
	const session = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"claude-code","version":"2.1.163"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}` + "\n"
	launch := func(instance, service, pid string) result {
		t.Helper()
		env := []string{"XDG_STATE_HOME=" + state, store.EnvLedger + "=", "LaunchInstanceID=" + instance,
			"XPC_SERVICE_NAME=" + service, "GIO_LAUNCHED_DESKTOP_FILE_PID=" + pid}
		r := runBinary(t, env, session, append([]string{"wrap", "--grace", "60s", "--"}, child...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, `"id":1`) {
			t.Fatalf("wrap in launch %s: exit %d\nstdout %s\nstderr %s", instance, r.code, r.stdout, r.stderr)
		}
		return r
	}
	executions := func() int { n, _ := os.ReadFile(effects); return strings.Count(string(n), "\n") }

	if first := launch("A281362F-32CD-47D7-8E43-D3D5424E3853", "application.com.microsoft.VSCode.59852660.59852666", "2065"); strings.Contains(first.stdout, "effectfence/replayed") || executions() != 1 {
		t.Fatalf("the first launch's charge: %s, %d executions", first.stdout, executions())
	}
	second := launch("951B4739-66F6-4FD9-8778-5009F40807F0", "application.com.microsoft.VSCode.9361502674.9361502680", "559791")
	if !strings.Contains(second.stdout, `"effectfence/replayed":true`) || executions() != 1 {
		t.Fatalf("the next launch's duplicate ran again (%d executions; want 1, replayed):\n%s\nstderr %s", executions(), second.stdout, second.stderr)
	}
	files, _ := filepath.Glob(filepath.Join(state, "effectfence", "wrap-*.db"))
	if len(files) != 1 {
		t.Fatalf("two launches of one configuration used %d default ledger files, want 1: %v", len(files), files)
	}
}
