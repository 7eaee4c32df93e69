package probe_test

import (
	"os"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
)

// The server's tools are its listing's "tools", spelled so, as MCP's SDK clients read them
// (the TypeScript SDK's ListToolsResultSchema drops a "Tools"). Before 2026-12-07 the probe read
// the listing with encoding/json, which also took "Tools" and kept the last: it refused to
// probe t, which every client sees, saying the server has only u, which none does.
func TestProbeReadsTheListingAsTheSDKsReadIt(t *testing.T) {
	t.Parallel()
	srv := shServer(t, t.TempDir(), "twolists.sh", `      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ok"}]}}\n' "$id"`)
	b, err := os.ReadFile(srv)
	if err != nil {
		t.Fatal(err)
	}
	const tools = `{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}`
	if !strings.Contains(string(b), tools) {
		t.Fatalf("shServer's listing is not %s", tools)
	}
	b = []byte(strings.Replace(string(b), tools, `{"tools":[{"name":"t","inputSchema":{"type":"object"}}],"Tools":[{"name":"u","inputSchema":{"type":"object"}}]}`, 1))
	if err := os.WriteFile(srv, b, 0o700); err != nil {
		t.Fatal(err)
	}
	r := cmdtest.Run(t, nil, bin, "probe", "--json", "--tool", "t", "--calls", "2", "--", srv)
	if rep := probeJSON(t, r); rep.Succeeded != 2 {
		t.Errorf("probe of t: exit %d, %d calls succeeded, want 2\nstdout:\n%s\nstderr:\n%s", r.Code, rep.Succeeded, r.Stdout, r.Stderr)
	}
	r = cmdtest.Run(t, nil, bin, "probe", "--tool", "u", "--calls", "2", "--", srv)
	if r.Code != 2 || !strings.Contains(r.Stderr, `no tool "u"; it has: t;`) {
		t.Errorf("probe of u: exit %d, want 2 naming t alone\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
}
