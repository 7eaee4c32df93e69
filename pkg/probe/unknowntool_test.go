package probe_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
)

// TestProbeUnknownToolOfALongListIsOneShortLine: a tool the server does not have is a usage
// error that names the tools it has, but no more than a screenful of them, however many the
// server lists and however long their names. Before 2026-12-07 every name went into the one
// line: a server of 5,000 tools of 1,000 characters made a 5 MB usage "line" on stderr, and
// as much again in --json's error on stdout.
func TestProbeUnknownToolOfALongListIsOneShortLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var tools []map[string]any
	for i := range 5000 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("tool_%04d_%s", i, strings.Repeat("x", 1000)), "inputSchema": map[string]any{"type": "object"}})
	}
	list, err := json.Marshal(map[string]any{"tools": tools})
	if err != nil {
		t.Fatal(err)
	}
	listFile := filepath.Join(dir, "list.json")
	if err := os.WriteFile(listFile, list, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := filepath.Join(dir, "many.sh")
	script := `#!/bin/sh
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([^,}]*\).*/\1/p')
  case "$line" in
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":' "$id"; cat ` + listFile + `; printf '}\n';;
    *'"tools/call"'*) exit 3;;
  esac
done
`
	if err := os.WriteFile(srv, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, asJSON := range []bool{false, true} {
		args := []string{"probe", "--tool", "nope", "--calls", "2", "--", srv}
		if asJSON {
			args = append([]string{"probe", "--json"}, args[1:]...)
		}
		r := cmdtest.Run(t, nil, bin, args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, `no tool "nope"`) || !strings.Contains(r.Stderr, "tool_0000_") || !strings.Contains(r.Stderr, "and 4980 more") {
			t.Errorf("--json %v: exit %d, stderr %.300q", asJSON, r.Code, r.Stderr)
		}
		if len(r.Stderr) > 8<<10 || len(r.Stdout) > 8<<10 {
			t.Errorf("--json %v: a usage error of %d bytes on stderr and %d on stdout", asJSON, len(r.Stderr), len(r.Stdout))
		}
	}
}
