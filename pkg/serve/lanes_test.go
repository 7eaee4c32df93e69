package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// stdioClient drives Server.Serve over real pipes, as a client process would.
type stdioClient struct {
	t    *testing.T
	in   *io.PipeWriter
	mu   sync.Mutex
	wait map[string]chan json.RawMessage
	done chan error
}

func startStdio(t *testing.T, eng *fence.Engine, opts serve.Options) *stdioClient {
	t.Helper()
	return startStdioWith(t, eng, opts, nil)
}

// startStdioWith is startStdio with a chance to change the server before it serves.
func startStdioWith(t *testing.T, eng *fence.Engine, opts serve.Options, setup func(*serve.Server)) *stdioClient {
	t.Helper()
	srv, err := serve.New(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(srv)
	}
	return startStdioOf(t, srv)
}

// startStdioOf serves srv over pipes and initializes it, as a client does.
func startStdioOf(t *testing.T, srv *serve.Server) *stdioClient {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &stdioClient{t: t, in: inW, wait: map[string]chan json.RawMessage{}, done: make(chan error, 1)}
	go func() {
		c.done <- srv.Serve(context.Background(), inR, outW)
		outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			c.mu.Lock()
			ch := c.wait[string(m.ID)]
			delete(c.wait, string(m.ID))
			c.mu.Unlock()
			if ch != nil {
				ch <- append(json.RawMessage(nil), sc.Bytes()...)
			}
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case err := <-c.done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return after its input ended")
		}
	})
	c.send(0, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "lanes-test", "version": "1"}})
	return c
}

// send writes one request and returns the channel its response arrives on.
func (c *stdioClient) send(id int, method string, params any) <-chan json.RawMessage {
	c.t.Helper()
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		c.t.Fatal(err)
	}
	ch := make(chan json.RawMessage, 1)
	c.mu.Lock()
	c.wait[fmt.Sprint(id)] = ch
	c.mu.Unlock()
	if _, err := c.in.Write(append(msg, '\n')); err != nil {
		c.t.Fatal(err)
	}
	return ch
}

// toolResult decodes a tools/call response into out and reports whether it is a tool error.
func toolResult(t *testing.T, raw json.RawMessage, out any) bool {
	t.Helper()
	var r struct {
		Result *struct {
			StructuredContent json.RawMessage `json:"structuredContent"`
			IsError           bool            `json:"isError"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Result == nil {
		t.Fatalf("not a tool result: %s", raw)
	}
	if err := json.Unmarshal(r.Result.StructuredContent, out); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	return r.Result.IsError
}

func recv(t *testing.T, ch <-chan json.RawMessage, what string, within time.Duration) json.RawMessage {
	t.Helper()
	select {
	case raw := <-ch:
		return raw
	case <-time.After(within):
		t.Fatalf("no answer to %s within %s", what, within)
		return nil
	}
}

// TestWaitersDoNotStarveTheHolder is issue 11 item 5 over stdio: 40 prepares waiting on one
// intent (more than the 32 workers) must not keep the holder's fence_commit from landing; every
// waiter receives the holder's cert and none is told "fresh".
func TestWaitersDoNotStarveTheHolder(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{LeaseTTL: 2 * time.Second})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	args := map[string]any{"intent": "charge:order-9", "tool": "charge_card", "args": map[string]any{"amount": 4900}}

	var first serve.PrepareResult
	if toolResult(t, recv(t, c.send(1, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": args}), "first prepare", 30*time.Second), &first) || first.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", first)
	}
	const waiters = 40
	wait := make([]<-chan json.RawMessage, waiters)
	for i := range wait {
		a := map[string]any{"wait_secs": 30}
		for k, v := range args {
			a[k] = v
		}
		wait[i] = c.send(100+i, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": a})
	}
	// Give the waiters a moment to take their slots before the commit is sent: the order the
	// bug needed. (The test passes without the pause too; the pause makes it able to fail.)
	time.Sleep(500 * time.Millisecond)
	hb := c.send(2, "tools/call", map[string]any{"name": serve.ToolHeartbeat, "arguments": map[string]any{"ticket": first.Ticket}})
	var beat serve.HeartbeatResult
	if toolResult(t, recv(t, hb, "heartbeat behind 40 waiters", 30*time.Second), &beat) {
		t.Fatalf("heartbeat refused: %+v", beat)
	}
	commit := c.send(3, "tools/call", map[string]any{"name": serve.ToolCommit, "arguments": map[string]any{"ticket": first.Ticket, "result": map[string]any{"charge_id": "ch_1"}}})
	var committed serve.CommitResult
	if toolResult(t, recv(t, commit, "commit behind 40 waiters", 30*time.Second), &committed) || committed.Cert == nil {
		t.Fatalf("commit: %+v", committed)
	}
	for i, ch := range wait {
		var p serve.PrepareResult
		raw := recv(t, ch, fmt.Sprintf("waiter %d", i), 60*time.Second)
		if toolResult(t, raw, &p) || p.Status != serve.StatusAlreadyDone || p.Cert == nil || p.Cert.Hash != committed.Cert.Hash {
			t.Fatalf("waiter %d: want the holder's cert %s, got %s", i, committed.Cert.Hash, raw)
		}
	}
}

// TestWaitEndsWithTheLease: a waiter never outwaits the lease of the claim it waits on. The
// holder goes silent; the waiter (wait_secs 60) is answered soon after the 1 s lease lapses,
// and is not told "fresh": the holder is alive and may still be running the effect.
func TestWaitEndsWithTheLease(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{LeaseTTL: time.Second})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	args := map[string]any{"intent": "charge:order-10", "tool": "charge_card", "args": map[string]any{"amount": 4900}}
	var first serve.PrepareResult
	if toolResult(t, recv(t, c.send(1, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": args}), "first prepare", 30*time.Second), &first) || first.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", first)
	}
	args["wait_secs"] = 60
	start := time.Now()
	raw := recv(t, c.send(2, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": args}), "waiter", 30*time.Second)
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the waiter waited %s on a 1 s lease", took)
	}
	var p serve.PrepareResult
	if !toolResult(t, raw, &p) && p.Status == serve.StatusFresh {
		t.Fatalf("a waiter was told fresh while the holder of the lapsed lease is alive: %s", raw)
	}
}

// A lane's queued calls take its slots in the order they came: with one slot held, 40 calls
// queued behind it run one by one in the order they were sent once it frees (before, each
// queued call raced for the slot on a goroutine of its own, and a later call could overtake
// an earlier one, or one sent before its cancellation was read).
func TestLaneRunsQueuedCallsInOrder(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var ran []int
	c := startStdioWith(t, eng, serve.Options{Workers: 1}, func(s *serve.Server) {
		s.MCP().AddTool(mcp.NewTool("block"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			close(started)
			<-release
			return mcp.NewToolResultText("unblocked"), nil
		})
		s.MCP().AddTool(mcp.NewTool("note", mcp.WithNumber("n")), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mu.Lock()
			ran = append(ran, req.GetInt("n", -1))
			mu.Unlock()
			return mcp.NewToolResultText("noted"), nil
		})
	})
	blocked := holdCallLane(t, c, started)
	const n = 40
	var answers []<-chan json.RawMessage
	for i := range n {
		id := fmt.Sprintf(`"n%d"`, i)
		answers = append(answers, c.sendLine(id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"note","arguments":{"n":%d}}}`, id, i)))
	}
	close(release)
	for _, ch := range append(answers, blocked) {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("a queued call was never answered")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, got := range ran {
		if got != i {
			t.Fatalf("queued calls ran in the order %v; want 0 to %d in the order sent", ran, n-1)
		}
	}
	if len(ran) != n {
		t.Fatalf("%d of %d queued calls ran", len(ran), n)
	}
}

// holdCallLane sends a call of the tool "block" (which the test added to the server, and
// which closes started once it runs) and waits until it holds the call lane's one slot. It
// returns the channel the call's answer arrives on.
func holdCallLane(t *testing.T, c *stdioClient, started <-chan struct{}) <-chan json.RawMessage {
	t.Helper()
	blocked := c.sendLine(`"block"`, `{"jsonrpc":"2.0","id":"block","method":"tools/call","params":{"name":"block","arguments":{}}}`)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking tool never started")
	}
	return blocked
}

// TestWaitersBeyondTheQueueDoNotStarveTheHolder: more waiting prepares than the wait lane's
// slots and line hold. The router read them in order and, the line full, stopped reading the
// client's input until a waiter's slot freed: the holder's fence_commit, sent after them, was
// not even read until a wait ended, which is no sooner than the lease it waits on lapses. The
// intent went unknown, every waiter was told prior_failure (call an operator), and only the
// holder's late commit healed it: docs/serve.md says settling calls never wait behind waiting
// prepares. A waiter the wait lane has no room for is asked without waiting instead
// (intent_in_flight now, or the cert), so the reader goes on to the commit.
func TestWaitersBeyondTheQueueDoNotStarveTheHolder(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{LeaseTTL: 3 * time.Second})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{Workers: 2, Queue: 4})
	args := map[string]any{"intent": "charge:order-11", "tool": "charge_card", "args": map[string]any{"amount": 4900}}

	var first serve.PrepareResult
	if toolResult(t, recv(t, c.send(1, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": args}), "first prepare", 30*time.Second), &first) || first.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", first)
	}
	const waiters = 20 // 2 slots, 4 in line, 1 with the dispatcher: 13 more
	start := time.Now()
	wait := make([]<-chan json.RawMessage, waiters)
	for i := range wait {
		a := map[string]any{"wait_secs": 30}
		for k, v := range args {
			a[k] = v
		}
		wait[i] = c.send(100+i, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": a})
	}
	commit := c.send(3, "tools/call", map[string]any{"name": serve.ToolCommit, "arguments": map[string]any{"ticket": first.Ticket, "result": map[string]any{"charge_id": "ch_1"}}})
	var committed serve.CommitResult
	if toolResult(t, recv(t, commit, "commit behind 20 waiters", 30*time.Second), &committed) || committed.Cert == nil {
		t.Fatalf("commit: %+v", committed)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("the holder's commit, sent behind %d waiters, was answered %s after the first waiter was sent (the lease is 3 s)", waiters, took.Round(time.Millisecond))
	}
	answers := map[string]int{}
	for i, ch := range wait {
		raw := recv(t, ch, fmt.Sprintf("waiter %d", i), 60*time.Second)
		var p serve.PrepareResult
		if toolResult(t, raw, &p) {
			var r serve.Refusal
			toolResult(t, raw, &r)
			answers[r.Code]++
			continue
		}
		if p.Status != serve.StatusAlreadyDone || p.Cert == nil || p.Cert.Hash != committed.Cert.Hash {
			t.Fatalf("waiter %d: want the holder's cert %s, got %s", i, committed.Cert.Hash, raw)
		}
		answers[p.Status]++
	}
	// The cert, or intent_in_flight for a waiter the wait lane had no room for.
	if answers[serve.StatusAlreadyDone]+answers[fence.CodeInFlight] != waiters {
		t.Errorf("the waiters were answered %v; want %s or %s", answers, serve.StatusAlreadyDone, fence.CodeInFlight)
	}
}
