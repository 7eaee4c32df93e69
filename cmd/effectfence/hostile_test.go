package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// evilText is what a hostile MCP server puts in its answers and its stderr.
const evilText = "done\x1b]0;pwned\x07\x1b[2J\x1b[32m ALL CLEAR \x1b[0m\rforged \u009b2J \u202eevil"

// TestHostileServerProcess is not a test: it is a tiny MCP stdio server that the probe and
// wrap tests start (os.Args[0] with EFFECTFENCE_TEST_HOSTILE=1). Its tool "echo" answers
// with terminal escapes, and it writes escapes to its stderr.
func TestHostileServerProcess(t *testing.T) {
	if os.Getenv("EFFECTFENCE_TEST_HOSTILE") == "" {
		return
	}
	fmt.Fprintln(os.Stderr, "hostile server: "+evilText)
	answerRequests(func(method string) []byte {
		var result any
		switch method {
		case "initialize":
			result = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "hostile\x1b[2J", "version": "1"}}
		case "tools/list":
			tools := []any{map[string]any{"name": "echo", "description": "answers with escapes",
				"inputSchema": map[string]any{"type": "object"}, "annotations": map[string]any{"destructiveHint": true}}}
			if os.Getenv("EFFECTFENCE_TEST_HOSTILE") == "names" { // scan --run: a published name with escapes
				tools = append(tools, map[string]any{"name": "refund\x1b]0;pwned\x07 \u202eevil", "inputSchema": map[string]any{"type": "object"},
					"annotations": map[string]any{"readOnlyHint": true}})
			}
			result = map[string]any{"tools": tools}
		case "tools/call":
			fmt.Fprintln(os.Stderr, "hostile server called: "+evilText)
			result = map[string]any{"content": []any{map[string]any{"type": "text", "text": evilText}}}
		default:
			result = map[string]any{}
		}
		b, _ := json.Marshal(result)
		return b
	})
	os.Exit(0)
}

// answerRequests is the loop of a test's MCP server process: it reads JSON-RPC messages from
// standard input (lines up to 1 MiB) and answers each request with the result answer gives
// for its method, written as it is; a nil result leaves the request unanswered.
// Notifications and lines that are not JSON get no answer.
func answerRequests(answer func(method string) []byte) {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(in.Bytes(), &m) != nil || m.ID == nil {
			continue
		}
		if result := answer(m.Method); result != nil {
			fmt.Printf("{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}\n", m.ID, result)
		}
	}
}

// hostileServer is the argv and environment that start the hostile server.
func hostileServer(t *testing.T) ([]string, []string) {
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	return []string{self, "-test.run=^TestHostileServerProcess$"}, []string{"EFFECTFENCE_TEST_HOSTILE=1", "NO_COLOR=1"}
}

// TestProbeEscapesWhatTheServerSays: the answers and the stderr of the server probed reach the
// terminal escaped, in text and in JSON.
func TestProbeEscapesWhatTheServerSays(t *testing.T) {
	t.Parallel()
	argv, env := hostileServer(t)
	for _, extra := range [][]string{nil, {"--json"}} {
		args := append(append([]string{"probe", "--tool", "echo", "--calls", "3"}, extra...), "--")
		r := runBinary(t, env, "", append(args, argv...)...)
		if r.code != exitOK && r.code != exitDoubleFire {
			t.Fatalf("probe %v = %d\n%s%s", extra, r.code, r.stdout, r.stderr)
		}
		for name, s := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
			if c, bad := actsOnTerminal(s); bad {
				t.Errorf("probe %v: %s holds %U:\n%s", extra, name, c, s)
			}
		}
		if !strings.Contains(r.stdout, `\u202eevil`) && !strings.Contains(r.stdout, `\x1b]0;pwned`) {
			t.Errorf("probe %v: the answer is not shown escaped:\n%s", extra, r.stdout)
		}
		if !strings.Contains(r.stderr, `hostile server: done\x1b]0;pwned`) {
			t.Errorf("probe %v: the server's stderr is not passed on escaped:\n%s", extra, r.stderr)
		}
	}
}

// TestScanEscapesTheScannedTree: a repository under review chooses its file names, tool names
// and source lines; none of their escapes reach the reviewer's terminal.
func TestScanEscapesTheScannedTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := "import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';\n" +
		"const server = new McpServer({ name: 'x', version: '1' });\n" +
		"server.tool('refund_payment\x1b]0;pwned\x07', 'Refunds a payment \u202eevil', { amount: z.number() }, async ({ amount }) => {\n" +
		"  await fetch('https://psp.example/refund\x1b[2J', { method: 'POST', body: JSON.stringify({ amount }) }); // \u009b2J\n" +
		"  return { content: [] };\n" +
		"});\n"
	if err := os.WriteFile(filepath.Join(dir, "server\x1b[31m.ts"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	argv, _ := hostileServer(t)
	for _, c := range []struct {
		flags []string
		run   bool
	}{{nil, false}, {[]string{"--json"}, false}, {[]string{"--sarif"}, false}, {nil, true}, {[]string{"--json"}, true}, {[]string{"--sarif"}, true}} {
		// With --run the server publishes a name with escapes and writes escapes to stderr.
		args := append(append([]string{"scan"}, c.flags...), dir)
		extra := c.flags
		if c.run {
			args = append(append(args, "--run", "--"), argv...)
			extra = append(append([]string{}, c.flags...), "--run")
		}
		env := []string{"NO_COLOR=1", "EFFECTFENCE_TEST_HOSTILE=names"}
		r := runBinary(t, env, "", args...)
		if r.code != exitOK {
			t.Fatalf("scan %v = %d\n%s", extra, r.code, r.stderr)
		}
		for name, s := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
			if c, bad := actsOnTerminal(s); bad {
				t.Errorf("scan %v: %s holds %U:\n%s", extra, name, c, s)
			}
		}
		if extra == nil && !strings.Contains(r.stdout, `server\x1b[31m.ts:4`) {
			t.Errorf("scan: the write site is not shown, escaped:\n%s", r.stdout)
		}
		if c.run && c.flags == nil && !strings.Contains(r.stdout, `refund\x1b]0;pwned\x07 \u202eevil`) {
			t.Errorf("scan --run: the published name is not shown, escaped:\n%s", r.stdout)
		}
	}
}

// TestWrapEscapesTheServersStderr: wrap passes its child's stderr on to its own, escaped; the
// protocol on stdout is passed through untouched (it is not a terminal's business).
func TestWrapEscapesTheServersStderr(t *testing.T) {
	t.Parallel()
	argv, env := hostileServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, effectfence(t), append([]string{"wrap", "--ledger", "memory", "--"}, argv...)...)
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(outPipe)
	out.Buffer(make([]byte, 1<<20), 1<<20)
	ask := func(line string) string {
		t.Helper()
		if _, err := io.WriteString(in, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if !out.Scan() {
			t.Fatalf("no answer to %s; stderr:\n%s", line, stderr.String())
		}
		return out.Text()
	}
	ask(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	ask(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	res := ask(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	var m struct {
		Result struct {
			Content []struct{ Text string }
		}
	}
	if err := json.Unmarshal([]byte(res), &m); err != nil || len(m.Result.Content) != 1 || m.Result.Content[0].Text != evilText {
		t.Errorf("the protocol must carry the server's answer unchanged (%v): %s", err, res)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("wrap: %v\n%s", err, stderr.String())
	}
	if c, bad := actsOnTerminal(stderr.String()); bad {
		t.Errorf("wrap's stderr holds %U:\n%s", c, stderr.String())
	}
	if !strings.Contains(stderr.String(), `hostile server called: done\x1b]0;pwned`) {
		t.Errorf("the server's stderr is not passed on, escaped:\n%s", stderr.String())
	}
}
