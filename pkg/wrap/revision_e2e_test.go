package wrap_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// v2Report is what testdata/v2_client.mjs, a client on MCP's TypeScript SDK 2, prints.
type v2Report struct {
	Version string `json:"version"`
	Answers []struct {
		Text     string `json:"text"`
		Replayed bool   `json:"replayed"`
	} `json:"answers"`
	Error *struct {
		Name    string          `json:"name"`
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
		Data    struct {
			Supported []string `json:"supported"`
			Requested string   `json:"requested"`
		} `json:"data"`
	} `json:"error"`
}

// runV2Client runs testdata/v2_client.mjs in mode (auto or modern) with env (STDIO_ARGV or
// URL) and returns its report.
func runV2Client(t *testing.T, peers, mode string, calls int, env ...string) v2Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	node := exec.CommandContext(ctx, "node", filepath.Join("testdata", "v2_client.mjs"))
	node.Env = append(append(os.Environ(), env...), "PEERS="+peers, "MODE="+mode, "CALLS="+strconv.Itoa(calls), "GORACE=atexit_sleep_ms=0")
	var stderr logBuf
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	var rep v2Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report %s: %v\n%s", out, err, stderr.String())
	}
	return rep
}

// TestStatelessClientIsToldTheRevisionsWrapSpeaks: MCP 2026-07-28 has no initialize, and a
// client of MCP's TypeScript SDK 2 that negotiates sends server/discover first. wrap answers
// such a request, before any initialize, with MCP's -32022 listing the revisions it speaks
// (wrap.Revisions), so that client, speaking 2025-11-25 too, falls back to initialize and is
// fenced as any other (the identical second call is replayed, the tool ran once), and one
// speaking only 2026-07-28 fails saying what wrap speaks. Before, wrap answered that the
// server was not running (-32603): the first still fell back, but the second failed with the
// SDK's "the server gave no modern evidence", naming nothing. Real client, real binary, real
// server on the SDK 2 (which itself speaks 2026-07-28, so nothing but wrap refuses it).
func TestStatelessClientIsToldTheRevisionsWrapSpeaks(t *testing.T) {
	t.Parallel()
	peers := needPeers(t, "node_modules/@modelcontextprotocol/client/package.json", "node_modules/@modelcontextprotocol/server/package.json")
	script, _ := filepath.Abs(filepath.Join("testdata", "v2_server.mjs"))
	effects := filepath.Join(t.TempDir(), "effects")
	argv, _ := json.Marshal([]string{efBin, "wrap", "--ledger", filepath.Join(t.TempDir(), "ledger.db"), "--", "node", script})
	env := []string{"STDIO_ARGV=" + string(argv), "EFFECTS=" + effects}

	t.Run("a client that speaks 2025-11-25 too falls back to initialize", func(t *testing.T) {
		rep := runV2Client(t, peers, "auto", 2, env...)
		if rep.Error != nil || rep.Version != "2025-11-25" || len(rep.Answers) != 2 {
			t.Fatalf("through wrap: %+v", rep)
		}
		if a := rep.Answers; a[0].Text != "paid 5" || a[0].Replayed || a[1].Text != "paid 5" || !a[1].Replayed {
			t.Fatalf("answers: %+v", a)
		}
		got, _ := os.ReadFile(effects)
		if string(got) != "paid 5\n" {
			t.Fatalf("the tool ran %q, want once", got)
		}
	})
	t.Run("a client of 2026-07-28 only is told what wrap speaks", func(t *testing.T) {
		rep := runV2Client(t, peers, "modern", 1, env...)
		e := rep.Error
		if e == nil || e.Name != "UnsupportedProtocolVersionError" || string(e.Code) != "-32022" {
			t.Fatalf("want the SDK's UnsupportedProtocolVersionError, got version %q, error %+v", rep.Version, e)
		}
		if !slices.Equal(e.Data.Supported, wrap.Revisions) || e.Data.Requested != "2026-07-28" ||
			!strings.Contains(e.Message, "2025-11-25") || !strings.Contains(e.Message, "initialize") {
			t.Fatalf("the error does not say what wrap speaks: %+v", *e)
		}
	})
}
