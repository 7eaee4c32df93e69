package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A wrap intent's --result is the MCP tool result its duplicates receive: anything but a JSON
// object is a usage error, before the ledger is opened. Before, `--result 5` was recorded and
// replayed to every duplicate, which MCP clients refuse as a tool result.
func TestResolveResultOfAWrapIntentIsAnObject(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "none.db")
	for _, result := range []string{`5`, `"charged"`, `[{"type":"text","text":"x"}]`, `null`, ` true`} {
		code, out, errOut := runCLI(t, "", "ledger", "resolve", "wrap:charge:3f", "--happened", "--result", result, "--reason", "checked", "--ledger", missing)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "JSON object") {
			t.Errorf("--result %s: exit %d, stdout %q, stderr %q; want a usage error asking for an object", result, code, out, errOut)
		}
	}
	// An object passes the check (the missing ledger then fails the command), and so does any
	// JSON for an intent that is not wrap's (serve's results are the agent's own).
	for _, c := range [][2]string{{"wrap:charge:3f", ` {"content":[]}`}, {"charge:order-7", `5`}} {
		code, _, errOut := runCLI(t, "", "ledger", "resolve", c[0], "--happened", "--result", c[1], "--reason", "checked", "--ledger", missing)
		if code == exitUsage || strings.Contains(errOut, "JSON object") {
			t.Errorf("%s --result %s: exit %d, stderr %q; want the ledger's own error", c[0], c[1], code, errOut)
		}
	}
}
