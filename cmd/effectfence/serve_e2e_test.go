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
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// peersDir returns the repository's .peers directory, or skips when the npm peers are missing.
func peersDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", ".peers"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Skip("npm peers are not installed (run scripts/install-peers, or scripts/test): " + err.Error())
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: " + err.Error())
	}
	return dir
}

// nodeReport runs testdata/script with node, env added to ours, for at most two minutes, and
// decodes the one JSON report it prints into rep; it returns the script's stdout and stderr,
// for messages.
func nodeReport(t *testing.T, script string, env []string, rep any) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", filepath.Join("testdata", script))
	node.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	node.Stdout, node.Stderr = &out, &errb
	if err := node.Run(); err != nil {
		t.Fatalf("node %s: %v\nstderr:\n%s", script, err, errb.String())
	}
	if err := json.Unmarshal(out.Bytes(), rep); err != nil {
		t.Fatalf("%s's report: %v\n%s", script, err, out.String())
	}
	return out.String(), errb.String()
}

// callOutcome is what the Node client saw for one tool call.
type callOutcome struct {
	IsError  bool            `json:"isError"`
	JSON     json.RawMessage `json:"json"`
	Same     bool            `json:"same"`
	RPCError *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"rpcError"`
}

func (c callOutcome) prepared(t *testing.T, step string) serve.PrepareResult {
	t.Helper()
	if c.RPCError != nil || c.IsError || !c.Same {
		t.Fatalf("%s: want a result with equal text and structuredContent, got %+v %s", step, c.RPCError, c.JSON)
	}
	var p serve.PrepareResult
	if err := json.Unmarshal(c.JSON, &p); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	return p
}

func (c callOutcome) refusal(t *testing.T, step string) serve.Refusal {
	t.Helper()
	if c.RPCError != nil || !c.IsError || !c.Same {
		t.Fatalf("%s: want a tool error with equal text and structuredContent, got %+v %s", step, c.RPCError, c.JSON)
	}
	var r serve.Refusal
	if err := json.Unmarshal(c.JSON, &r); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	if r.Next == "" || r.Message == "" {
		t.Fatalf("%s: refusal without message or next step: %s", step, c.JSON)
	}
	return r
}

type clientReport struct {
	Server       struct{ Name, Version string } `json:"server"`
	Instructions string                         `json:"instructions"`
	Tools        []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"inputSchema"`
	} `json:"tools"`
	First, Commit, Duplicate                       callOutcome
	Concurrent                                     []callOutcome
	AbortPrepare, Abort, AfterAbort                callOutcome
	ReleasePrepare, Release, AfterRelease          callOutcome
	Heartbeat, ForgedNonce, ForgedToken            callOutcome
	StatusAfterForged                              callOutcome
	TwoServers                                     []callOutcome
	UnknownTool, EmptyIntent, WrongType            callOutcome
	StatsBefore, AfterRestart, AbortedAfterRestart callOutcome
	StatsAfter                                     callOutcome
}

// TestServeBinary runs the built `effectfence serve` (race detector on) as a child process:
// through the real MCP client from npm, and with raw bad input down its stdin.
func TestServeBinary(t *testing.T) {
	bin := effectfence(t)
	t.Run("mcp client", func(t *testing.T) { t.Parallel(); serveWithMCPClient(t, bin) })
	t.Run("bad input over stdio", func(t *testing.T) { t.Parallel(); serveBadInputOverStdio(t, bin) })
}

// serveWithMCPClient drives the server through the @modelcontextprotocol/sdk client, on a
// SQLite ledger that survives a restart of the server.
func serveWithMCPClient(t *testing.T, bin string) {
	peers := peersDir(t)
	ledger := filepath.Join(t.TempDir(), "server.db")

	var rep clientReport
	nodeReport(t, "serve_client.mjs", []string{"PEERS=" + peers, "EF_BIN=" + bin, "EF_LEDGER=" + ledger}, &rep)

	t.Run("handshake and tools", func(t *testing.T) {
		if rep.Server.Name != "effectfence" || strings.Count(rep.Instructions, ". ") < 2 || !strings.Contains(rep.Instructions, "fence_prepare") {
			t.Fatalf("server %+v, instructions %q", rep.Server, rep.Instructions)
		}
		published := publishedSchemas(t)
		if len(rep.Tools) != len(published) {
			t.Fatalf("client lists %d tools, server defines %d", len(rep.Tools), len(published))
		}
		for _, tool := range rep.Tools {
			want, ok := published[tool.Name]
			if !ok {
				t.Fatalf("unexpected tool %s", tool.Name)
			}
			if !jsonEqual(t, tool.InputSchema, want) {
				t.Errorf("%s: the client received schema %s, the server generates %s", tool.Name, tool.InputSchema, want)
			}
		}
		var prep struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(published[serve.ToolPrepare], &prep); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(prep.Properties["args"].Type) != "[object null]" || prep.Properties["intent"].Type != "string" {
			t.Fatalf("fence_prepare properties: %+v", prep.Properties)
		}
	})

	first := rep.First.prepared(t, "first prepare")
	var committed serve.CommitResult
	t.Run("prepare, commit, duplicate replays the cert", func(t *testing.T) {
		if first.Status != serve.StatusFresh || first.Ticket == nil {
			t.Fatalf("first prepare: %+v", first)
		}
		if rep.Commit.IsError || json.Unmarshal(rep.Commit.JSON, &committed) != nil || committed.Cert == nil {
			t.Fatalf("commit: %s", rep.Commit.JSON)
		}
		if err := committed.Cert.Verify(); err != nil {
			t.Fatal(err)
		}
		dup := rep.Duplicate.prepared(t, "duplicate")
		if dup.Status != serve.StatusAlreadyDone || dup.Cert == nil || dup.Cert.Hash != committed.Cert.Hash || !jsonEqual(t, dup.Cert.Result, []byte(`{"charge_id":"ch_1","amount":4900}`)) {
			t.Fatalf("duplicate: %+v", dup)
		}
	})

	t.Run("16 concurrent prepares, one fresh", func(t *testing.T) { oneFresh(t, rep.Concurrent) })
	t.Run("16 concurrent prepares on two server processes sharing the ledger, one fresh", func(t *testing.T) { oneFresh(t, rep.TwoServers) })

	t.Run("abort fences", func(t *testing.T) {
		rep.AbortPrepare.prepared(t, "prepare before abort")
		if rep.Abort.IsError {
			t.Fatalf("abort: %s", rep.Abort.JSON)
		}
		if r := rep.AfterAbort.refusal(t, "after abort"); r.Code != fence.CodePriorFailure || r.State != fence.StateFailed {
			t.Fatalf("after abort: %+v", r)
		}
	})

	t.Run("release frees", func(t *testing.T) {
		p := rep.ReleasePrepare.prepared(t, "prepare before release")
		if rep.Release.IsError {
			t.Fatalf("release: %s", rep.Release.JSON)
		}
		again := rep.AfterRelease.prepared(t, "after release")
		if again.Status != serve.StatusFresh || again.Ticket.Token <= p.Ticket.Token {
			t.Fatalf("after release: %+v", again)
		}
	})

	t.Run("heartbeat extends the lease", func(t *testing.T) {
		held := rep.AfterRelease.prepared(t, "holder")
		var hb serve.HeartbeatResult
		if rep.Heartbeat.IsError || json.Unmarshal(rep.Heartbeat.JSON, &hb) != nil || hb.Ticket.Token != held.Ticket.Token || hb.Ticket.LeaseUntil.Before(held.Ticket.LeaseUntil) {
			t.Fatalf("heartbeat: %s", rep.Heartbeat.JSON)
		}
	})

	t.Run("forged tickets are refused and change nothing", func(t *testing.T) {
		for name, c := range map[string]callOutcome{"nonce": rep.ForgedNonce, "token": rep.ForgedToken} {
			if r := c.refusal(t, "forged "+name); r.Code != fence.CodeLeaseLost {
				t.Fatalf("forged %s: %+v", name, r)
			}
		}
		var st serve.StatusResult
		if rep.StatusAfterForged.IsError || json.Unmarshal(rep.StatusAfterForged.JSON, &st) != nil || st.Intent.State != fence.StateInFlight {
			t.Fatalf("status after forged commits: %s", rep.StatusAfterForged.JSON)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		if rep.UnknownTool.RPCError == nil || !strings.Contains(rep.UnknownTool.RPCError.Message, "fence_clear") {
			t.Fatalf("unknown tool: %+v %s", rep.UnknownTool.RPCError, rep.UnknownTool.JSON)
		}
		if r := rep.EmptyIntent.refusal(t, "empty intent"); r.Code != fence.CodeInvalid || r.Field != "intent" {
			t.Fatalf("empty intent: %+v", r)
		}
		if r := rep.WrongType.refusal(t, "wrong type"); r.Code != fence.CodeInvalid || r.Field != "args" {
			t.Fatalf("wrong type: %+v", r)
		}
	})

	t.Run("after a restart the duplicate still replays", func(t *testing.T) {
		p := rep.AfterRestart.prepared(t, "after restart")
		if p.Status != serve.StatusAlreadyDone || p.Cert.Hash != committed.Cert.Hash {
			t.Fatalf("after restart: %+v", p)
		}
		if r := rep.AbortedAfterRestart.refusal(t, "aborted intent after restart"); r.Code != fence.CodePriorFailure {
			t.Fatalf("aborted intent after restart: %+v", r)
		}
		var before, after serve.StatsResult
		if json.Unmarshal(rep.StatsBefore.JSON, &before) != nil || json.Unmarshal(rep.StatsAfter.JSON, &after) != nil {
			t.Fatalf("stats: %s / %s", rep.StatsBefore.JSON, rep.StatsAfter.JSON)
		}
		if after.SinceBoot.Replayed != 1 || after.Ledger.Admitted != before.SinceBoot.Admitted || after.Ledger.Replayed != before.SinceBoot.Replayed+1 {
			t.Fatalf("stats before restart %+v, after %+v", before, after)
		}
	})
}

// publishedSchemas returns the input schema of each tool as an in-process server publishes it.
func publishedSchemas(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	srv, err := serve.New(fence.New(fence.NewMemoryStore(), fence.Config{}), serve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(srv.MCP().HandleMessage(context.Background(), []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)))
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Result struct {
			Tools []struct {
				Name        string          `json:"name"`
				InputSchema json.RawMessage `json:"inputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for _, tool := range resp.Result.Tools {
		out[tool.Name] = tool.InputSchema
	}
	return out
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// serveBadInputOverStdio sends what no SDK client would send straight down the pipe and
// checks that every message gets a clear answer and the server keeps serving.
func serveBadInputOverStdio(t *testing.T, bin string) {
	// Generous: a 10 MB request costs seconds under -race, many more on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--ledger", "memory")
	stdin, out, stderr := startPiped(t, cmd)
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatalf("write: %v (stderr: %s)", err, stderr.String())
		}
	}
	type response struct {
		ID     any `json:"id"`
		Result *struct {
			IsError           bool            `json:"isError"`
			StructuredContent json.RawMessage `json:"structuredContent"`
		} `json:"result"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	recv := func() response {
		t.Helper()
		line, err := out.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read: %v (stderr: %s)", err, stderr.String())
		}
		var r response
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("stdout carried a non-protocol line %q: %v", line, err)
		}
		return r
	}
	// One request at a time, so each answer is the answer to the last line sent.
	exchange := func(line string) response { send(line); return recv() }

	if r := exchange(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`); r.Error != nil {
		t.Fatalf("initialize: %+v", r.Error)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	huge := `{"intent":"big","tool":"upload","args":{"blob":"` + strings.Repeat("x", 10<<20) + `"}}`
	cases := []struct {
		name, line string
		rpcCode    int    // want this JSON-RPC error code, or 0 for a tool error
		says       string // in the error message
	}{
		{"not JSON", `{"jsonrpc":"2.0","id":2,"method":`, -32700, "Parse error"},
		{"method not a string", `{"jsonrpc":"2.0","id":3,"method":42}`, -32600, ""},
		{"unknown method", `{"jsonrpc":"2.0","id":4,"method":"fence/clear","params":{}}`, -32601, ""},
		{"unknown tool", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"fence_sweep","arguments":{}}}`, -32602, "fence_sweep"},
		{"arguments not an object", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"fence_prepare","arguments":"charge"}}`, 0, "want object"},
		{"wrong argument type", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":["a"],"tool":"t"}}}`, 0, "got array, want string"},
		{"empty intent", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"","tool":"t"}}}`, 0, "must not be empty"},
		{"10 MB arguments", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"fence_prepare","arguments":` + huge + `}}`, 0, "at most 1048576 are accepted"},
		// Past the bound on one message the line is not read whole: refused unread (id null).
		{"a 65 MiB line", `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"big","tool":"upload","args":{"blob":"` + strings.Repeat("x", 65<<20) + `"}}}}`, -32600, "message longer than 67108864 bytes refused"},
	}
	for _, c := range cases {
		r := exchange(c.line)
		switch {
		case c.rpcCode != 0:
			if r.Error == nil || (c.rpcCode != -32600 && r.Error.Code != c.rpcCode) || !strings.Contains(r.Error.Message, c.says) {
				t.Errorf("%s: want JSON-RPC error %d mentioning %q, got %+v %+v", c.name, c.rpcCode, c.says, r.Error, r.Result)
			}
		default:
			if r.Result == nil || !r.Result.IsError {
				t.Errorf("%s: want a tool error, got %+v", c.name, r.Error)
				continue
			}
			var ref serve.Refusal
			if err := json.Unmarshal(r.Result.StructuredContent, &ref); err != nil || ref.Code != fence.CodeInvalid || !strings.Contains(ref.Message, c.says) {
				t.Errorf("%s: want invalid_request mentioning %q, got %s", c.name, c.says, r.Result.StructuredContent)
			}
		}
	}

	// Still serving, and nothing of the bad input reached the ledger.
	r := exchange(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"big","tool":"upload","args":{"blob":"small"}}}}`)
	var p serve.PrepareResult
	if r.Result == nil || r.Result.IsError || json.Unmarshal(r.Result.StructuredContent, &p) != nil || p.Status != serve.StatusFresh {
		t.Fatalf("after bad input: %+v %+v", r.Error, r.Result)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("server exit: %v (stderr: %s)", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "panic") {
		t.Fatalf("server stderr mentions a panic:\n%s", stderr.String())
	}
}

// oneFresh checks that of 16 racing prepares of one intent exactly one was fresh and the
// others were refused as in flight.
func oneFresh(t *testing.T, answers []callOutcome) {
	t.Helper()
	fresh, inFlight := 0, 0
	for i, c := range answers {
		if c.IsError {
			if r := c.refusal(t, fmt.Sprint("racer ", i)); r.Code == fence.CodeInFlight {
				inFlight++
				continue
			}
			t.Errorf("racer %d: %s", i, c.JSON)
			continue
		}
		if p := c.prepared(t, fmt.Sprint("racer ", i)); p.Status == serve.StatusFresh {
			fresh++
		}
	}
	if len(answers) != 16 || fresh != 1 || inFlight != 15 {
		t.Fatalf("%d answers: fresh=%d in_flight=%d", len(answers), fresh, inFlight)
	}
}

// lockedBuffer is a bytes.Buffer that a child process's stderr copier writes while the test
// reads it.
// startPiped starts cmd with pipes to its stdin and from its stdout (read through a buffer of
// 1 MiB: answers may be long lines), and its stderr kept, for a test that talks to it line by
// line.
func startPiped(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, *bufio.Reader, *lockedBuffer) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{} // read by the test while the process writes it
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return stdin, bufio.NewReaderSize(stdout, 1<<20), stderr
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
