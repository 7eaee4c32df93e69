package wrap_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHashOnlyReplayOfAToolWithAnOutputSchema holds docs/privacy.md's "a duplicate is told
// already executed, NOT executed again, result not kept" for a tool with an output schema,
// through the real TypeScript SDK client. That client refuses a result of such a tool that has
// no structuredContent unless it is marked isError ("has an output schema but did not return
// structured content"); the statement wrap answers with has none (the result is not kept), and
// was marked isError false, so the duplicate's agent got that protocol error and never the
// statement. It is now marked isError for such a tool, and says why.
func TestHashOnlyReplayOfAToolWithAnOutputSchema(t *testing.T) {
	t.Parallel()
	peers, _ := filepath.Abs("../../.peers")
	for _, p := range []string{"node_modules/@modelcontextprotocol/sdk/package.json", "node_modules/.bin/mcp-server-everything"} {
		if _, err := os.Stat(filepath.Join(peers, p)); err != nil {
			t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	node := exec.CommandContext(ctx, "node", filepath.Join("testdata", "hashonly_client.mjs"))
	node.Env = append(os.Environ(), "PEERS="+peers, "EF_BIN="+efBin, "EF_LEDGER="+filepath.Join(t.TempDir(), "ledger.db"), "GORACE=atexit_sleep_ms=0")
	var stderr logBuf
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	type res struct {
		IsError    bool            `json:"isError"`
		Text       string          `json:"text"`
		Structured json.RawMessage `json:"structured"`
		Replayed   bool            `json:"replayed"`
		NotKept    bool            `json:"notKept"`
		Error      string          `json:"error"`
	}
	var rep struct{ First, Second res }
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report %s: %v", out, err)
	}
	if rep.First.Error != "" || rep.First.IsError || rep.First.Replayed || len(rep.First.Structured) == 0 || string(rep.First.Structured) == "null" {
		t.Fatalf("the first call, run by the server: %s", out)
	}
	s := rep.Second
	if s.Error != "" || !s.Replayed || !s.NotKept || !strings.Contains(s.Text, "already executed") || !strings.Contains(s.Text, "NOT executed again") {
		t.Fatalf("the duplicate, as the SDK client hands it to its agent: %s", out)
	}
	if !s.IsError || !strings.Contains(s.Text, "output schema") {
		t.Fatalf("the duplicate of a tool with an output schema: want isError and the reason for it in its text: %s", out)
	}
}
