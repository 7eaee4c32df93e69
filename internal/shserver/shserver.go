// Package shserver is for tests: a stdio MCP server written as a sh script, which serves a
// tools/list result a test chose (however large, or paging for ever) without a Node or Go
// server of its own.
package shserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Listing writes into dir a stdio MCP server that answers initialize, answers every
// tools/list with result (written once to a file beside it, as JSON), and runs onCall, a sh
// command, on a tools/call ("" answers nothing). It returns the script's path.
func Listing(t testing.TB, dir string, result any, onCall string) string {
	t.Helper()
	b, err := json.Marshal(result)
	if err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(dir, "listing.json")
	if err := os.WriteFile(list, b, 0o600); err != nil {
		t.Fatal(err)
	}
	call := ""
	if onCall != "" {
		call = "\n    *'\"tools/call\"'*) " + onCall + ";;"
	}
	script := `#!/bin/sh
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([^,}]*\).*/\1/p')
  case "$line" in
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":' "$id"; cat '` + list + `'; printf '}\n';;` + call + `
  esac
done
`
	srv := filepath.Join(dir, "listing.sh")
	if err := os.WriteFile(srv, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return srv
}
