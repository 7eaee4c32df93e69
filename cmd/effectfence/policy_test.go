package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

func TestPolicyCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("version: 1\ntools:\n  charge:\n    key: [order_id]\n  \"list_*\":\n    fence: false\n"), 0o600)
	os.WriteFile(bad, []byte("version: 1\ntools:\n  charge:\n    key: order_id\n    wait: soon\nfence_read: true\n"), 0o600)

	code, out, errw := runCLI(t, "", "policy", "check", good)
	if code != exitOK || out != good+": ok: 1 tool by name, 1 glob\n" || errw != "" {
		t.Fatalf("good: exit %d, stdout %q, stderr %q", code, out, errw)
	}
	code, out, errw = runCLI(t, "", "policy", "check", bad)
	lines := strings.Split(strings.TrimSpace(errw), "\n")
	if code != exitUsage || out != "" || len(lines) != 4 ||
		!strings.HasPrefix(lines[0], bad+":4:10: key must be a list") ||
		!strings.HasPrefix(lines[1], bad+`:5:11: wait: "soon" is not a duration`) ||
		!strings.HasPrefix(lines[2], bad+`:6:1: unknown key "fence_read"`) ||
		!strings.Contains(lines[3], "not accepted (3 errors") {
		t.Fatalf("bad: exit %d, stdout %q, stderr:\n%s", code, out, errw)
	}
	for _, args := range [][]string{{"policy", "check"}, {"policy", "check", good, bad}, {"policy", "check", filepath.Join(dir, "missing.yaml")}} {
		if code, out, errw := runCLI(t, "", args...); code != exitUsage || out != "" || errw == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errw)
		}
	}
}

// TestPolicyExamplesPassCheck runs `policy check` on the example files the docs show.
func TestPolicyExamplesPassCheck(t *testing.T) {
	files, _ := filepath.Glob("../../examples/policy/*.yaml")
	if len(files) < 2 {
		t.Fatalf("examples: %v", files)
	}
	for _, f := range files {
		if code, out, errw := runCLI(t, "", "policy", "check", f); code != exitOK || !strings.Contains(out, ": ok: ") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", f, code, out, errw)
		}
	}
}

func TestPolicyInitUsage(t *testing.T) {
	existing := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(existing, []byte("keep me"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "init"}, "no MCP server command given"},
		{[]string{"policy", "init", "--"}, "no MCP server command given"},
		{[]string{"policy", "init", "-o", existing, "--", "x"}, "exists; pass --force"},
		{[]string{"policy", "init", "--scan", "/nonexistent/src", "--", "x"}, "--scan"},
		{[]string{"policy", "init", "--", "/nonexistent/mcp-server"}, "cannot run the MCP server command"},
	} {
		code, out, errw := runCLI(t, "", c.args...)
		if code != exitUsage || out != "" || !strings.Contains(errw, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", c.args, code, out, errw, c.want)
		}
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep me" {
		t.Fatalf("an existing file was replaced: %q", b)
	}
}

// TestPolicyInitRealServers: `policy init` against the real npm server-everything and
// server-memory writes a file that `policy check` accepts and that wrap runs with: a
// read-only tool passes through, a fenced tool's duplicate is replayed.
func TestPolicyInitRealServers(t *testing.T) {
	t.Parallel()
	peers := peersDir(t)
	bin := effectfence(t)
	for _, c := range []struct {
		server, scan      string
		passTool, passArg string
		fenceTool, fenArg string
	}{
		{"mcp-server-memory", "server-memory", "read_graph", `{}`, "create_entities", `{"entities":[{"name":"order-7","entityType":"order","observations":["paid"]}]}`},
		{"mcp-server-everything", "", "echo", `{"message":"hi"}`, "toggle-simulated-logging", `{}`},
	} {
		t.Run(c.server, func(t *testing.T) {
			dir := t.TempDir()
			server := filepath.Join(peers, "node_modules", ".bin", c.server)
			env := []string{"MEMORY_FILE_PATH=" + filepath.Join(dir, "memory.jsonl"), "XDG_STATE_HOME=" + filepath.Join(dir, "state"), "EFFECTFENCE_LEDGER="}
			file := filepath.Join(dir, "policy.yaml")
			args := []string{"policy", "init", "-o", file}
			if c.scan != "" {
				args = append(args, "--scan", filepath.Join(peers, "node_modules", "@modelcontextprotocol", c.scan, "dist"))
			}
			r := runBinary(t, env, "", append(args, "--", server)...)
			if r.code != exitOK || r.stdout != "" {
				t.Fatalf("policy init: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
			}
			src, _ := os.ReadFile(file)
			if !strings.Contains(string(src), "\n  "+c.passTool+":\n    fence: false\n") || !strings.Contains(string(src), "\n  "+c.fenceTool+":\n    fence: true\n") {
				t.Fatalf("the generated policy does not pass %s and fence %s:\n%s", c.passTool, c.fenceTool, src)
			}
			if c.scan != "" && (!strings.Contains(string(src), "  # scan: index.js:") || !strings.Contains(string(src), "  #   write sdk at index.js:")) {
				t.Fatalf("--scan added no evidence:\n%s", src)
			}
			if r := runBinary(t, env, "", "policy", "check", file); r.code != exitOK || !strings.Contains(r.stdout, ": ok: ") {
				t.Fatalf("policy check of the generated file: exit %d, %s %s\n%s", r.code, r.stdout, r.stderr, src)
			}
			log := &syncbuf.Buffer{}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			s, err := mcpstdio.Start(ctx, mcpstdio.Config{
				Command: []string{bin, "wrap", "--policy", file, "--ledger", filepath.Join(dir, "ledger.db"), "--", server},
				Env:     append(env, "GORACE=atexit_sleep_ms=0"), Stderr: log, InitTimeout: time.Minute,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			replayed := func(tool, args string) bool {
				t.Helper()
				raw, err := s.CallTool(ctx, tool, json.RawMessage(args))
				if err != nil {
					t.Fatalf("%s: %v", tool, err)
				}
				var x struct {
					IsError bool                       `json:"isError"`
					Meta    map[string]json.RawMessage `json:"_meta"`
				}
				if err := json.Unmarshal(raw, &x); err != nil || x.IsError {
					t.Fatalf("%s: %s %v", tool, raw, err)
				}
				return string(x.Meta["effectfence/replayed"]) == "true"
			}
			for range 2 {
				if replayed(c.passTool, c.passArg) {
					t.Fatalf("%s (fence: false) was replayed", c.passTool)
				}
			}
			if replayed(c.fenceTool, c.fenArg) || !replayed(c.fenceTool, c.fenArg) {
				t.Fatalf("the duplicate of %s (fence: true) was not replayed", c.fenceTool)
			}
			if !strings.Contains(log.String(), "effectfence wrap: policy "+file+": ok") {
				t.Fatalf("wrap's log does not name the policy:\n%s", log.String())
			}
		})
	}
}

// policy init --upstream and wrap --policy --upstream against the real server-everything in its
// Streamable HTTP mode.
func TestPolicyInitAndWrapUpstream(t *testing.T) {
	peers := peersDir(t)
	bin := effectfence(t)
	server := filepath.Join(peers, "node_modules", ".bin", "mcp-server-everything")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := exec.Command(server, "streamableHttp")
	srv.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	srvLog := &syncbuf.Buffer{}
	srv.Stderr = srvLog
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(srvLog.String(), "listening on port"); {
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not start: %s", srvLog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	dir := t.TempDir()
	env := []string{"XDG_STATE_HOME=" + filepath.Join(dir, "state"), "EFFECTFENCE_LEDGER="}
	file := filepath.Join(dir, "policy.yaml")
	if r := runBinary(t, env, "", "policy", "init", "-o", file, "--upstream", url); r.code != exitOK {
		t.Fatalf("policy init --upstream: exit %d, %s", r.code, r.stderr)
	}
	src, _ := os.ReadFile(file)
	if !strings.Contains(string(src), "\n  echo:\n    fence: false\n") || !strings.Contains(string(src), "\n  toggle-simulated-logging:\n    fence: true\n") || !strings.Contains(string(src), fmt.Sprintf("127.0.0.1:%d/…", port)) {
		t.Fatalf("the generated policy:\n%s", src)
	}
	if r := runBinary(t, env, "", "policy", "check", file); r.code != exitOK {
		t.Fatalf("policy check: %s %s", r.stdout, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := &syncbuf.Buffer{}
	s, err := mcpstdio.Start(ctx, mcpstdio.Config{
		Command: []string{bin, "wrap", "--policy", file, "--ledger", filepath.Join(dir, "ledger.db"), "--upstream", url},
		Env:     append(append(os.Environ(), env...), "GORACE=atexit_sleep_ms=0"), Stderr: log, InitTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var metas []string
	for range 2 {
		raw, err := s.CallTool(ctx, "toggle-simulated-logging", json.RawMessage(`{}`))
		if err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		metas = append(metas, string(raw))
	}
	if strings.Contains(metas[0], `"effectfence/replayed":true`) || !strings.Contains(metas[1], `"effectfence/replayed":true`) {
		t.Fatalf("through --upstream the duplicate was not replayed: %v", metas)
	}
}

// TestPolicyPassedToolNamedOnceByTheGateway: wrap --listen with a policy giving the read-only
// echo of the real server-everything a replay window: each session runs its own child, and
// the log names echo's setting that has no effect once, not once per session.
func TestPolicyPassedToolNamedOnceByTheGateway(t *testing.T) {
	t.Parallel()
	peers := peersDir(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte("version: 1\ntools:\n  echo:\n    replay_window: 1d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--listen", "127.0.0.1:0", "--policy", file, "--ledger", filepath.Join(dir, "l.db"),
		"--", filepath.Join(peers, "node_modules", ".bin", "mcp-server-everything"))
	for i := range 3 {
		sid := openSession(t, g.url)
		if _, body := g.post(t, "", sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}`); !strings.Contains(body, "Echo: hi") || strings.Contains(body, `"effectfence/replayed":true`) {
			t.Fatalf("session %d: echo answered %s", i, body)
		}
	}
	// A line the gateway writes after all of the above: a tools/call without an id is logged
	// as not forwarded. Once it is in the log, so is every line before it.
	sid := openSession(t, g.url)
	g.post(t, "", sid, `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}`)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(g.logText(), "was NOT forwarded"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not log the call without an id:\n%s", g.logText())
		}
	}
	const line = `tool "echo" is annotated readOnlyHint and is not fenced, so its calls pass through and its replay_window have no effect`
	if n := strings.Count(g.logText(), line); n != 1 {
		t.Fatalf("named %d times over 3 sessions:\n%s", n, g.logText())
	}
}

// TestPolicyInitLeavesNoTempFile: policy init -o writes through a temporary file beside the
// target; when the last step fails (the target is a directory, even with --force) the error
// is reported and the temporary file is removed, not left as .policy-*.yaml in the directory.
func TestPolicyInitLeavesNoTempFile(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "policy.yaml")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, []string{"XDG_STATE_HOME=" + filepath.Join(dir, "state")}, "", "policy", "init", "--force", "-o", target, "--", bin, "demo-server")
	if r.code == exitOK {
		t.Fatalf("policy init onto a directory succeeded: %s", r.stderr)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".policy-*"))
	if len(left) > 0 {
		t.Fatalf("policy init failed (%s) and left %v behind", strings.TrimSpace(r.stderr), left)
	}
}
