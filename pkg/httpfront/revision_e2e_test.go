package httpfront_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// TestStatelessClientIsToldTheRevisionsTheGatewaySpeaks: a client of MCP's TypeScript SDK 2
// that negotiates POSTs server/discover (MCP 2026-07-28: no initialize, no session) first.
// The gateway answers it with 400 and MCP's -32022 listing the revisions it speaks
// (wrap.Revisions), under the request's id, so that client, speaking 2025-11-25 too, sends
// initialize and is fenced as any other, and one speaking only 2026-07-28 fails saying what
// the gateway speaks. Before, the POST got 400 "Mcp-Session-Id is required" (-32600, id null):
// the first still fell back, the second failed with the SDK's "the server gave no modern
// evidence", naming nothing. The client and server scripts are pkg/wrap's (testdata).
func TestStatelessClientIsToldTheRevisionsTheGatewaySpeaks(t *testing.T) {
	t.Parallel()
	peers, _ := filepath.Abs("../../.peers")
	for _, p := range []string{"client", "server"} {
		if _, err := os.Stat(filepath.Join(peers, "node_modules/@modelcontextprotocol", p, "package.json")); err != nil {
			t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	testdata, _ := filepath.Abs(filepath.Join("..", "wrap", "testdata"))
	effects := filepath.Join(t.TempDir(), "effects")
	gateway := startProcess(t, "gateway", "effectfence wrap: listening on ", []string{"PEERS=" + peers, "EFFECTS=" + effects},
		binary(t), "wrap", "--listen", "127.0.0.1:0", "--ledger", filepath.Join(t.TempDir(), "ledger.db"), "--grace", "500ms",
		"--", "node", filepath.Join(testdata, "v2_server.mjs"))

	type report struct {
		Version string
		Answers []struct {
			Text     string
			Replayed bool
		}
		Error *struct {
			Name    string
			Code    json.RawMessage
			Message string
			Data    struct {
				Supported []string
				Requested string
			}
		}
	}
	run := func(t *testing.T, mode string, calls string) report {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		node := exec.CommandContext(ctx, "node", filepath.Join(testdata, "v2_client.mjs"))
		node.Env = append(os.Environ(), "PEERS="+peers, "MODE="+mode, "URL="+gateway.url, "CALLS="+calls)
		var stderr logBuf
		node.Stderr = &stderr
		out, err := node.Output()
		if err != nil {
			t.Fatalf("node client: %v\n%s", err, stderr.String())
		}
		var rep report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("report %s: %v\n%s", out, err, stderr.String())
		}
		return rep
	}
	t.Run("a client that speaks 2025-11-25 too falls back to initialize", func(t *testing.T) {
		rep := run(t, "auto", "2")
		if rep.Error != nil || rep.Version != "2025-11-25" || len(rep.Answers) != 2 {
			t.Fatalf("through the gateway: %+v", rep)
		}
		if a := rep.Answers; a[0].Text != "paid 5" || a[0].Replayed || a[1].Text != "paid 5" || !a[1].Replayed {
			t.Fatalf("answers: %+v", a)
		}
		if got, _ := os.ReadFile(effects); string(got) != "paid 5\n" {
			t.Fatalf("the tool ran %q, want once", got)
		}
	})
	t.Run("a client of 2026-07-28 only is told what the gateway speaks", func(t *testing.T) {
		rep := run(t, "modern", "1")
		e := rep.Error
		if e == nil || e.Name != "UnsupportedProtocolVersionError" || string(e.Code) != "-32022" {
			t.Fatalf("want the SDK's UnsupportedProtocolVersionError, got version %q, error %+v", rep.Version, e)
		}
		if !slices.Equal(e.Data.Supported, wrap.Revisions) || e.Data.Requested != "2026-07-28" ||
			!strings.Contains(e.Message, "2025-11-25") || !strings.Contains(e.Message, "initialize") {
			t.Fatalf("the error does not say what the gateway speaks: %+v", *e)
		}
	})
}
