package mcpstdio_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

func TestMain(m *testing.M) {
	mcptest.MaybeServe()
	os.Exit(m.Run())
}

// syncBuf is a goroutine-safe buffer for the child's stderr.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func config(t *testing.T, mode string) (mcpstdio.Config, string, *syncBuf) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	effects := filepath.Join(t.TempDir(), "effects")
	errs := &syncBuf{}
	return mcpstdio.Config{Command: []string{exe}, Env: mcptest.Env(effects, mode), Stderr: errs, InitTimeout: 10 * time.Second}, effects, errs
}

func start(t *testing.T, cfg mcpstdio.Config) *mcpstdio.Session {
	t.Helper()
	s, err := mcpstdio.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestHandshakeForwardsCapabilitiesAndKeepsToolsListBytes(t *testing.T) {
	cfg, _, errs := config(t, "")
	cfg.Init = json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"sampling":{},"roots":{"listChanged":true}},"clientInfo":{"name":"agent","version":"9"}}`)
	s := start(t, cfg)
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
		Instructions    string `json:"instructions"`
	}
	if err := json.Unmarshal(s.InitResult(), &init); err != nil {
		t.Fatal(err)
	}
	if init.ProtocolVersion != "2025-06-18" || init.Instructions != `{"sampling":{},"roots":{"listChanged":true}}` {
		t.Fatalf("child did not receive our capabilities: %s", s.InitResult())
	}
	res, err := s.ListTools(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != mcptest.ToolsList {
		t.Fatalf("tools/list result changed:\n got %s\nwant %s", res, mcptest.ToolsList)
	}
	if !strings.Contains(errs.String(), "mcptest: serving") {
		t.Fatalf("child stderr not drained to ours: %q", errs.String())
	}
}

func TestConcurrentCallsMatchTheirResponses(t *testing.T) {
	cfg, effects, _ := config(t, "")
	s := start(t, cfg)
	const n = 40
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Later calls finish first: responses come back out of order.
			res, err := s.CallTool(context.Background(), "slow", json.RawMessage(fmt.Sprintf(`{"ms":%d,"tag":"t%d"}`, (n-i)*3, i)))
			if err != nil {
				errc <- err
				return
			}
			if !strings.Contains(string(res), "slow done") {
				errc <- fmt.Errorf("call %d: unexpected result %s", i, res)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if got := len(mcptest.Effects(effects)); got != n {
		t.Fatalf("child recorded %d effects, want %d", got, n)
	}
}

func TestRPCErrorAndToolError(t *testing.T) {
	cfg, _, _ := config(t, "")
	s := start(t, cfg)
	_, err := s.CallTool(context.Background(), "no_such_tool", json.RawMessage(`{}`))
	var rpc *mcpstdio.RPCError
	if !errors.As(err, &rpc) || !strings.Contains(rpc.Message, "unknown tool") {
		t.Fatalf("want the child's JSON-RPC error, got %v", err)
	}
	res, err := s.CallTool(context.Background(), "fail", json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(res), `"isError":true`) {
		t.Fatalf("want an isError result, got %s, %v", res, err)
	}
	if _, err := s.CallTool(context.Background(), "charge", json.RawMessage(`{bad`)); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("invalid arguments must not be sent, got %v", err)
	}
}

func TestNotificationsReachTheCallback(t *testing.T) {
	cfg, _, _ := config(t, "")
	got := make(chan string, 4)
	cfg.OnNotification = func(method string, _ json.RawMessage) { got <- method }
	s := start(t, cfg)
	if _, err := s.CallTool(context.Background(), "add_tool", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "notifications/tools/list_changed" {
			t.Fatalf("got notification %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no list_changed notification delivered")
	}
	res, err := s.ListTools(context.Background(), "")
	if err != nil || !strings.Contains(string(res), `"name":"extra"`) {
		t.Fatalf("tools/list after the change: %s, %v", res, err)
	}
}

func TestChildDeathFailsThePendingCallAndChildRestarts(t *testing.T) {
	cfg, effects, _ := config(t, "")
	c := mcpstdio.NewChild(cfg)
	defer c.Close()
	s, err := c.Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	_, err = s.CallTool(context.Background(), "die", json.RawMessage(`{}`))
	var ee *mcpstdio.ExitError
	if !errors.As(err, &ee) || errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("a call the child died in must be an ExitError that was sent, got %v", err)
	}
	if !strings.Contains(ee.Why, "exit status 7") {
		t.Fatalf("exit status not reported: %v", ee)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session not marked done after the child died")
	}
	if _, err := s.CallTool(context.Background(), "charge", json.RawMessage(`{"amount":1}`)); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("a call on a dead session must be ErrNotSent, got %v", err)
	}
	s2, err := c.Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s2.Pid() == pid || c.Starts() != 2 {
		t.Fatalf("child not restarted: pid %d -> %d, starts %d", pid, s2.Pid(), c.Starts())
	}
	if _, err := s2.CallTool(context.Background(), "charge", json.RawMessage(`{"amount":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := len(mcptest.Effects(effects)); got != 2 {
		t.Fatalf("want 2 effects (die, charge), got %d", got)
	}
}

func TestGarbageLinesAreIgnored(t *testing.T) {
	cfg, _, errs := config(t, "garbage")
	s := start(t, cfg)
	res, err := s.ListTools(context.Background(), "")
	if err != nil || string(res) != mcptest.ToolsList {
		t.Fatalf("tools/list through garbage: %v", err)
	}
	if !strings.Contains(errs.String(), "not a JSON-RPC message") {
		t.Fatalf("garbage not reported on stderr: %q", errs.String())
	}
}

func TestChildThatExitsAtStart(t *testing.T) {
	cfg, _, _ := config(t, "exit")
	_, err := mcpstdio.Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "exiting at start as asked") {
		t.Fatalf("want an error naming the exit status and the child's stderr, got %v", err)
	}
	c := mcpstdio.NewChild(cfg)
	defer c.Close()
	_, err1 := c.Session(context.Background())
	_, err2 := c.Session(context.Background())
	if err1 == nil || err2 == nil || c.Starts() != 1 || !errors.Is(err2, mcpstdio.ErrNotSent) {
		t.Fatalf("a failing child must not be respawned within the backoff: starts=%d, %v, %v", c.Starts(), err1, err2)
	}
}

// A child that closes its stdin and then exits: the initialize cannot be written (a broken
// pipe) before the exit is seen, as when a server exits at once and the write comes first.
// The error still says how it ended. Before, it named the broken pipe alone, and wrap's
// TestAfterAFailedStartWrapSaysWhatFailed failed when the write lost that race.
func TestChildThatClosesItsStdinThenExitsSaysHowItEnded(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh")
	}
	// An initialize larger than a pipe holds: its write waits for the child to read, and
	// fails once the child has closed its stdin, before it exits.
	init := json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"},"_meta":{"pad":"` + strings.Repeat("p", 1<<20) + `"}}`)
	cfg := mcpstdio.Config{Command: []string{"sh", "-c", "exec 0<&-; sleep 0.3; echo leaving >&2; exit 3"}, Init: init, Stderr: &syncBuf{}, InitTimeout: 10 * time.Second}
	_, err := mcpstdio.Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "leaving") {
		t.Fatalf("want an error naming the exit status and the child's stderr, got %v", err)
	}
}

func TestChildThatNeverAnswersInitialize(t *testing.T) {
	cfg, _, _ := config(t, "mute")
	cfg.InitTimeout = 300 * time.Millisecond
	_, err := mcpstdio.Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "did not answer initialize within 300ms") {
		t.Fatalf("want an initialize timeout, got %v", err)
	}
}

func TestCommandThatDoesNotExist(t *testing.T) {
	_, err := mcpstdio.Start(context.Background(), mcpstdio.Config{Command: []string{"/nonexistent/mcp-server"}})
	if err == nil || !strings.Contains(err.Error(), "cannot start") {
		t.Fatalf("got %v", err)
	}
	if _, err := mcpstdio.Start(context.Background(), mcpstdio.Config{}); err == nil {
		t.Fatal("an empty command must be refused")
	}
}

func TestCloseEndsTheChild(t *testing.T) {
	cfg, _, _ := config(t, "")
	s := start(t, cfg)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var ee *mcpstdio.ExitError
	if !errors.As(s.Err(), &ee) || ee.Why != "closed" {
		t.Fatalf("Err after Close: %v", s.Err())
	}
	if _, err := s.ListTools(context.Background(), ""); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("call after Close: %v", err)
	}
}

func TestRealMemoryServer(t *testing.T) {
	bin, _ := filepath.Abs("../../.peers/node_modules/.bin/mcp-server-memory")
	if _, err := os.Stat(bin); err != nil {
		t.Skip("skipping: @modelcontextprotocol/server-memory is not installed; run scripts/install-peers")
	}
	s := start(t, mcpstdio.Config{Command: []string{bin}, Env: []string{"MEMORY_FILE_PATH=" + filepath.Join(t.TempDir(), "mem.jsonl")}, Stderr: &syncBuf{}})
	res, err := s.ListTools(context.Background(), "")
	if err != nil || !strings.Contains(string(res), `"create_entities"`) {
		t.Fatalf("tools/list: %.300s, %v", res, err)
	}
	res, err = s.CallTool(context.Background(), "read_graph", json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(res), "content") {
		t.Fatalf("read_graph: %s, %v", res, err)
	}
}

func TestRequestsFromTheChildReachOnRequest(t *testing.T) {
	cfg, _, _ := config(t, "")
	cfg.OnRequest = func(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
		if method != "roots/list" {
			return nil, &mcpstdio.RPCError{Code: -32601, Message: "unexpected " + method}
		}
		return json.RawMessage(`{"roots":[{"uri":"file:///tmp"}]}`), nil
	}
	s := start(t, cfg)
	res, err := s.CallTool(context.Background(), "ask", json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(res), `client said: {\"roots\":[{\"uri\":\"file:///tmp\"}]}`) {
		t.Fatalf("ask: %s %v", res, err)
	}
	cfg.OnRequest = nil // no handler: the child gets "method not found"
	s2 := start(t, cfg)
	res, err = s2.CallTool(context.Background(), "ask", json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(res), "client error: method not supported by this client: roots/list") {
		t.Fatalf("ask without a handler: %s %v", res, err)
	}
}

// TestKillReachesAChildThatIgnoresItsStdin: a child busy with a call lingers after its stdin
// closes; Kill, even while a Close is waiting on it, fails the call and ends the process.
func TestKillReachesAChildThatIgnoresItsStdin(t *testing.T) {
	cfg, _, _ := config(t, "")
	child := mcpstdio.NewChild(cfg)
	s, err := child.Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	called := make(chan error, 1)
	go func() {
		_, err := s.CallTool(context.Background(), "slow", json.RawMessage(`{"ms":600000}`))
		called <- err
	}()
	closed := make(chan error, 1)
	began := time.Now()
	go func() { closed <- child.Close() }() // waits for the child, which waits for the call
	<-s.Done()
	if err := child.Kill(); err != nil {
		t.Fatal(err)
	}
	// Close alone sends its first signal only after 2 s; Kill must not wait for that.
	if took := time.Since(began); took >= 2*time.Second {
		t.Fatalf("Kill returned %s after Close began: it waited for Close's grace", took)
	}
	var ee *mcpstdio.ExitError
	if err := <-called; !errors.As(err, &ee) {
		t.Fatalf("the call in flight: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil && procExists(pid) {
		t.Fatalf("child %d still exists after Kill", pid)
	}
	if _, err := child.Session(context.Background()); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("Session after Kill: %v", err)
	}
}

// procExists reports whether pid is a live (not zombie) process, where /proc tells.
func procExists(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// TestNotificationsBeforeAResponseAreDeliveredFirst: the child writes progress notifications
// and the result in one write; Call must not return before every one of them went through
// OnNotification (a proxy forwards them there, and must keep the child's order).
func TestNotificationsBeforeAResponseAreDeliveredFirst(t *testing.T) {
	cfg, _, _ := config(t, "")
	var mu sync.Mutex
	seen := map[string]int{} // progress notifications delivered, by progress token
	cfg.OnNotification = func(method string, params json.RawMessage) {
		if method != "notifications/progress" {
			return
		}
		var p struct {
			ProgressToken string `json:"progressToken"`
		}
		_ = json.Unmarshal(params, &p)
		time.Sleep(50 * time.Microsecond) // a callback slower than the reader widens the window
		mu.Lock()
		seen[p.ProgressToken]++
		mu.Unlock()
	}
	s := start(t, cfg)
	const calls, n = 300, 3
	for i := range calls {
		token := fmt.Sprintf("t%d", i)
		params := fmt.Sprintf(`{"name":"progress","arguments":{"n":%d},"_meta":{"progressToken":%q}}`, n, token)
		res, err := s.Call(context.Background(), "tools/call", json.RawMessage(params))
		if err != nil || !strings.Contains(string(res), "progress done") {
			t.Fatalf("call %d: %s %v", i, res, err)
		}
		mu.Lock()
		got := seen[token]
		mu.Unlock()
		if got != n {
			t.Fatalf("call %d returned after %d of its %d progress notifications were delivered", i, got, n)
		}
	}
}

// TestCallsFromConcurrentCallersKeepTheOrder: the same with calls in parallel, where the
// responses of some calls are read while the notifications of others are still delivered.
func TestCallsFromConcurrentCallersKeepTheOrder(t *testing.T) {
	cfg, _, _ := config(t, "")
	var mu sync.Mutex
	seen := map[string]int{}
	cfg.OnNotification = func(method string, params json.RawMessage) {
		var p struct {
			ProgressToken string `json:"progressToken"`
		}
		_ = json.Unmarshal(params, &p)
		mu.Lock()
		seen[p.ProgressToken]++
		mu.Unlock()
	}
	s := start(t, cfg)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				token := fmt.Sprintf("w%d-%d", w, i)
				params := fmt.Sprintf(`{"name":"progress","arguments":{"n":5},"_meta":{"progressToken":%q}}`, token)
				if _, err := s.Call(context.Background(), "tools/call", json.RawMessage(params)); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				got := seen[token]
				mu.Unlock()
				if got != 5 {
					errs <- fmt.Errorf("%s returned after %d of 5 progress notifications", token, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestOnNotificationMayStartACall: a callback that calls the session from a goroutine of its
// own (as the package comment asks) is served, with notifications still flowing.
func TestOnNotificationMayStartACall(t *testing.T) {
	cfg, _, _ := config(t, "")
	var s *mcpstdio.Session
	ready := make(chan struct{})
	listed := make(chan string, 1)
	cfg.OnNotification = func(method string, _ json.RawMessage) {
		if method != "notifications/tools/list_changed" {
			return
		}
		<-ready
		go func() {
			res, err := s.ListTools(context.Background(), "")
			if err != nil {
				listed <- err.Error()
				return
			}
			listed <- string(res)
		}()
	}
	s = start(t, cfg)
	close(ready)
	if _, err := s.CallTool(context.Background(), "add_tool", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-listed:
		if !strings.Contains(got, `"name":"extra"`) {
			t.Fatalf("listing from the callback: %s", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the listing started by the callback never returned")
	}
}

// A child cannot make the session keep without bound requests the client is slow to answer
// (or never answers): beyond MaxInbound waiting at once, each is refused with an error at
// once. Before, each one kept a goroutine and an entry (and, in wrap, another waiting for the
// agent) for as long as the client did not answer.
func TestChildRequestsWaitingAreBounded(t *testing.T) {
	cfg, _, errs := config(t, "flood")
	release := make(chan struct{})
	cfg.OnRequest = func(ctx context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
		select { // a client that does not answer
		case <-release:
		case <-ctx.Done():
		}
		return json.RawMessage(`{"roots":[]}`), nil
	}
	s := start(t, cfg)
	defer close(release) // before the Cleanup's Close: the handlers end
	want := fmt.Sprintf("mcptest: flood refused %d\n", mcptest.FloodRequests-mcpstdio.MaxInbound)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the child's %d requests were not refused beyond %d waiting (%d waiting); stderr:\n%.2000s", mcptest.FloodRequests, mcpstdio.MaxInbound, s.Inbound(), errs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := s.Inbound(); n != mcpstdio.MaxInbound {
		t.Fatalf("%d of the child's requests waiting, want %d", n, mcpstdio.MaxInbound)
	}
}

// TestCancellationOfAReusedID: a child may send a request under the id of one still being
// answered (legally once it has the first one's answer, when our cleanup may not have run
// yet). The first one's end must leave the second cancellable: before, its cleanup removed
// the second's entry, and the child's cancellation of that id reached nothing.
func TestCancellationOfAReusedID(t *testing.T) {
	cfg, _, errs := config(t, "reuse")
	var cause <-chan error
	cfg.OnRequest, cause = mcptest.ReuseAnswers()
	s := start(t, cfg)
	var why *mcpstdio.CancelReason
	if err := <-cause; !errors.As(err, &why) || why.Reason != "reused id" {
		t.Fatalf("the second request under a reused id ended with %v, want the child's cancellation; stderr:\n%.2000s", err, errs.String())
	}
	deadline := time.Now().Add(5 * time.Second) // the second handler's end may still run
	for s.Inbound() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.Inbound(); n != 0 {
		t.Fatalf("%d requests still registered after both were answered", n)
	}
}

// TestAnswerTooLongFailsTheCall: a server answers a call with a line longer than MaxLine (the
// id after the result, as the TypeScript SDK writes it). The line is skipped unread, and the
// call fails at once with an error that says so, neither a JSON-RPC error nor ErrNotSent (the
// server may have run it); the session serves on. Before, the call waited until the session
// ended.
func TestAnswerTooLongFailsTheCall(t *testing.T) {
	cfg, effects, _ := config(t, "")
	s := start(t, cfg)
	// Generous: the server writes 64 MiB and the session skips them, which took over a
	// minute under the race detector at CI's load of 18 (8 s quiet). The defect it catches
	// is a call that waits for the session's end: for ever.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"huge","arguments":{}}`))
	var rpc *jsonrpc.Error
	if err == nil || errors.As(err, &rpc) || errors.Is(err, mcpstdio.ErrNotSent) || !strings.Contains(err.Error(), "skipped unread") {
		t.Fatalf("a call answered with a line of %d bytes: %v", mcptest.HugeAnswer, err)
	}
	if n := len(mcptest.Effects(effects)); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	if _, err := s.Call(ctx, "ping", json.RawMessage(`{}`)); err != nil {
		t.Fatalf("the session after the long answer: %v", err)
	}
}

// A call whose context has ended before it is sent is not sent: the server runs nothing, and
// the error says so (a sent request that is cancelled at once may have run).
func TestCallWithAnEndedContextIsNotSent(t *testing.T) {
	cfg, effects, _ := config(t, "")
	s := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.CallTool(ctx, "charge", json.RawMessage(`{"amount":5}`))
	if !errors.Is(err, mcpstdio.ErrNotSent) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a call on an ended context: %v; want not sent, and why", err)
	}
	// The session goes on: a later call runs, and it is the only effect.
	if _, err := s.CallTool(context.Background(), "charge", json.RawMessage(`{"amount":6}`)); err != nil {
		t.Fatal(err)
	}
	if fx := mcptest.Effects(effects); len(fx) != 1 || !strings.Contains(fx[0], "amount=6") {
		t.Fatalf("effects %v; want only the second call's", fx)
	}
}

// TestRequestTooLongIsRefused: a server's request to the client (here roots/list) in a line
// longer than MaxLine is skipped unread and refused under its id, so the server's tool is not
// left waiting for an answer (mcptest's ask gives up after 10 s, and says so).
func TestRequestTooLongIsRefused(t *testing.T) {
	cfg, _, _ := config(t, "")
	s := start(t, cfg)
	// As TestAnswerTooLongFailsTheCall's: 64 MiB made, written and skipped under -race took
	// over 60 s in CI under a load of 17 on 2 cores.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := s.CallTool(ctx, "ask", json.RawMessage(fmt.Sprintf(`{"pad":%d}`, mcpstdio.MaxLine)))
	if err != nil || !strings.Contains(string(res), "client error") || !strings.Contains(string(res), "refused unread") {
		t.Fatalf("a request of the server's longer than MaxLine: %.300s, %v", res, err)
	}
	// This client answers no roots/list: what matters is that the next request is answered.
	if res, err := s.CallTool(ctx, "ask", json.RawMessage(`{}`)); err != nil || !strings.Contains(string(res), "not supported by this client: roots/list") {
		t.Fatalf("the next request: %.300s, %v", res, err)
	}
}

// TestChildThatClosesItsStdoutIsStopped: a server that closes its stdout and runs on has ended
// its session (its calls fail), and is stopped with its process group at once, not left
// running until the next use restarts it (it could still be running a call reported lost).
func TestChildThatClosesItsStdoutIsStopped(t *testing.T) {
	t.Parallel()
	cfg, _, errs := config(t, "")
	s := start(t, cfg)
	_, err := s.CallTool(context.Background(), "die", json.RawMessage(`{"close_stdout":true}`))
	var ee *mcpstdio.ExitError
	if !errors.As(err, &ee) || !strings.Contains(ee.Why, "closed its stdout") {
		t.Fatalf("a call whose server closed its stdout: %v", err)
	}
	select {
	case <-s.Exited():
	case <-time.After(20 * time.Second):
		t.Fatalf("the server still runs 20 s after it closed its stdout (pid %d)\n%s", s.Pid(), errs)
	}
}

// TestAnswerUnderItsIDSpelledOtherwise: a server must answer with the request's id, the same
// value (JSON-RPC), which a JSON library that reads every number as a double writes back as
// 7.0 for 7; MCP's SDK clients compare ids as values and accept it. The session matched
// answers to calls by the id's bytes: such a server's answer to initialize was ignored ("not
// waiting"), and the server was reported as not answering initialize at all.
func TestAnswerUnderItsIDSpelledOtherwise(t *testing.T) {
	t.Parallel()
	cfg, effects, _ := config(t, "doubleids")
	s := start(t, cfg)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"charge","arguments":{"amount":7}}`))
	if err != nil || !strings.Contains(string(res), "charge_id") {
		t.Fatalf("tools/call: %s, %v", res, err)
	}
	if n := len(mcptest.Effects(effects)); n != 1 {
		t.Fatalf("the call ran %d times, want 1", n)
	}
}
