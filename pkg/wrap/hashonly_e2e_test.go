package wrap_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sdkAnswer is one answer as the TypeScript SDK client hands it to its agent (testdata/sdk_client.mjs).
type sdkAnswer struct {
	IsError    bool            `json:"isError"`
	Text       string          `json:"text"`
	Structured json.RawMessage `json:"structured"`
	Replayed   bool            `json:"replayed"`
	NotKept    bool            `json:"notKept"`
	Error      string          `json:"error"`
}

// needPeers returns the npm peers' directory, or skips the test without them (and node).
func needPeers(t *testing.T, bins ...string) string {
	t.Helper()
	peers, _ := filepath.Abs("../../.peers")
	for _, p := range append([]string{"node_modules/@modelcontextprotocol/sdk/package.json"}, bins...) {
		if _, err := os.Stat(filepath.Join(peers, p)); err != nil {
			t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	return peers
}

// sdkCalls calls tool with args n times, one after another, through `effectfence wrap
// wrapArgs...` with the real TypeScript SDK client, and returns the answers as it gives them.
func sdkCalls(t *testing.T, peers string, env []string, wrapArgs []string, tool, args string, n int) []sdkAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	wa, _ := json.Marshal(wrapArgs)
	node := exec.CommandContext(ctx, "node", filepath.Join("testdata", "sdk_client.mjs"))
	node.Env = append(append(os.Environ(), env...), "PEERS="+peers, "EF_BIN="+efBin, "WRAP_ARGS="+string(wa),
		"TOOL="+tool, "TOOL_ARGS="+args, "CALLS="+strconv.Itoa(n), "GORACE=atexit_sleep_ms=0")
	var stderr logBuf
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	var rep struct{ Answers []sdkAnswer }
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Answers) != n {
		t.Fatalf("report %s: %v", out, err)
	}
	return rep.Answers
}

// TestHashOnlyReplayOfAToolWithAnOutputSchema holds docs/privacy.md's "a duplicate is told
// already executed, NOT executed again, result not kept" for a tool with an output schema,
// through the real TypeScript SDK client. That client refuses a result of such a tool that has
// no structuredContent unless it is marked isError ("has an output schema but did not return
// structured content"); the statement wrap answers with has none (the result is not kept), and
// was marked isError false, so the duplicate's agent got that protocol error and never the
// statement. It is now marked isError for such a tool, and says why.
func TestHashOnlyReplayOfAToolWithAnOutputSchema(t *testing.T) {
	t.Parallel()
	peers := needPeers(t, "node_modules/.bin/mcp-server-everything")
	const tool = "get-structured-content"
	a := sdkCalls(t, peers, nil, []string{"--ledger", filepath.Join(t.TempDir(), "ledger.db"), "--fence", tool, "--keep-result", tool + "=hash",
		"--", filepath.Join(peers, "node_modules/.bin/mcp-server-everything")}, tool, `{"location":"New York"}`, 2)
	if a[0].Error != "" || a[0].IsError || a[0].Replayed || len(a[0].Structured) == 0 || string(a[0].Structured) == "null" {
		t.Fatalf("the first call, run by the server: %+v", a[0])
	}
	s := a[1]
	if s.Error != "" || !s.Replayed || !s.NotKept || !strings.Contains(s.Text, "already executed") || !strings.Contains(s.Text, "NOT executed again") {
		t.Fatalf("the duplicate, as the SDK client hands it to its agent: %+v", s)
	}
	if !s.IsError || !strings.Contains(s.Text, "output schema") {
		t.Fatalf("the duplicate of a tool with an output schema: want isError and the reason for it in its text: %+v", s)
	}
}

// TestHashOnlyReplayToATaskAugmentedDuplicate: a task-augmented duplicate of a call that ran is
// answered with a task wrap completes itself, and the SDK hands its agent the statement that
// the call already ran. The statement is marked isError only because the tool's output schema
// asks for a structured result (above); wrap made that a "failed" task, and the TypeScript
// SDK's callToolStream hands its agent only "Task … failed" for a failed task, never its
// result: the agent was told a charge that ran once had failed.
func TestHashOnlyReplayToATaskAugmentedDuplicate(t *testing.T) {
	t.Parallel()
	peers := needPeers(t, "node_modules/.bin/mcp-server-everything")
	const tool = "get-structured-content"
	a := sdkCalls(t, peers, []string{"LATER_AS_TASK=1"}, []string{"--ledger", filepath.Join(t.TempDir(), "ledger.db"), "--fence", tool, "--keep-result", tool + "=hash",
		"--", filepath.Join(peers, "node_modules/.bin/mcp-server-everything")}, tool, `{"location":"New York"}`, 2)
	if a[0].Error != "" || a[0].Replayed || len(a[0].Structured) == 0 || string(a[0].Structured) == "null" {
		t.Fatalf("the first call, run by the server: %+v", a[0])
	}
	s := a[1]
	if s.Error != "" || !s.Replayed || !s.NotKept || !strings.Contains(s.Text, "already executed") || !strings.Contains(s.Text, "NOT executed again") {
		t.Fatalf("the task-augmented duplicate, as the SDK client hands it to its agent: %+v", s)
	}
}
