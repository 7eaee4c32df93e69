package probe_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// diesOnCall is an MCP server (sh) that completes the handshake and lists its tool t, then
// exits when it is called: no call is ever answered.
const diesOnCall = `#!/bin/sh
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([^,}]*\).*/\1/p')
  case "$line" in
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"dies","version":"1"}}}\n' "$id";;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}}\n' "$id";;
    *'"tools/call"'*) exit 0;;
  esac
done
`

// TestProbeNoCallAnswered holds docs/probe-and-demo.md's exit code 1 for "no call was
// answered": the report still says what happened (every call a transport failure,
// inconclusive), and the exit is not 0, which would read as "no double-fire proven".
func TestProbeNoCallAnswered(t *testing.T) {
	t.Parallel()
	srv := filepath.Join(t.TempDir(), "dies.sh")
	if err := os.WriteFile(srv, []byte(diesOnCall), 0o700); err != nil {
		t.Fatal(err)
	}
	r := cmdtest.Run(t, nil, bin, "probe", "--tool", "t", "--calls", "3", "--", srv)
	if r.Code != 1 || !strings.Contains(r.Stderr, "none of the 3 calls was answered") || !strings.Contains(r.Stdout, "INCONCLUSIVE") {
		t.Errorf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	r = cmdtest.Run(t, nil, bin, "probe", "--json", "--tool", "t", "--calls", "3", "--", srv)
	rep := probeJSON(t, r)
	if r.Code != 1 || rep.Verdict != probe.Inconclusive || rep.TransportFailures != 3 || rep.Succeeded != 0 {
		t.Errorf("--json: exit %d, report %+v", r.Code, rep)
	}
}
