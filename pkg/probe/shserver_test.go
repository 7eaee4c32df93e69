package probe_test

import (
	"os"
	"path/filepath"
	"testing"
)

// shServer writes an MCP server (sh) to dir/name and returns its path. It answers initialize,
// lists one tool t, and runs onCall for each tools/call, with the request's id in $id and the
// number of calls so far in $n (one more for each call).
func shServer(t *testing.T, dir, name, onCall string) string {
	t.Helper()
	script := `#!/bin/sh
n=0
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([^,}]*\).*/\1/p')
  case "$line" in
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}}\n' "$id";;
    *'"tools/call"'*)
      n=$((n+1))
` + onCall + `;;
  esac
done
`
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}
