package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoArgumentsOnARealTerminalShowsHelp holds the contract's "effectfence with no arguments:
// help on a terminal" with a terminal (a pseudo-terminal from script(1)), where
// TestNoArgumentsServesWhenStdinIsNotATerminal gives run /dev/null: the help is shown, the
// command ends, and no server runs, so no ledger is made in the state directory.
func TestNoArgumentsOnARealTerminalShowsHelp(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	out := onTerminal(t, []string{"XDG_STATE_HOME=" + state, "EFFECTFENCE_LEDGER=", "NO_COLOR=1"})
	if !strings.Contains(out, "make the side effects of AI-agent tool calls happen once") || !strings.Contains(out, "serve") || !strings.Contains(out, "wrap") {
		t.Fatalf("effectfence on a terminal, no arguments: want the help listing the commands, got:\n%q", out)
	}
	if strings.Contains(out, `"jsonrpc"`) || strings.Contains(out, "ledger "+filepath.Join(state, "effectfence")) {
		t.Fatalf("effectfence on a terminal served MCP:\n%q", out)
	}
	if entries, err := os.ReadDir(state); err != nil || len(entries) != 0 {
		t.Fatalf("effectfence on a terminal made %v in the state directory (%v): the help opens no ledger", entries, err)
	}
}
