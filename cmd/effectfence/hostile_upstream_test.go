package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
	"github.com/effectfence/effectfence/pkg/store"
)

// hostile is a Streamable HTTP MCP server that misbehaves per tool. It counts the tools/call
// POSTs of each tool (what reached it) and the initializes.
type hostile struct {
	mu      sync.Mutex
	sid     string
	inits   int
	posts   map[string]int
	release chan struct{}
	// pingsEnded hears from pay_pings's handler when it ends.
	pingsEnded chan struct{}
}

func (h *hostile) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if r.Method != http.MethodPost {
		return
	}
	body, _ := readAllLimited(r)
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	response := func(result string) []byte {
		return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, result))
	}
	h.mu.Lock()
	if m.Method == "initialize" {
		h.inits++
		h.sid = fmt.Sprintf("s%d", h.inits)
		sid := h.sid
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", sid)
		w.Write(response(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1"}}`))
		return
	}
	if r.Header.Get("Mcp-Session-Id") != h.sid {
		h.mu.Unlock()
		w.WriteHeader(http.StatusNotFound) // an ended session, as the transport says
		return
	}
	var p struct {
		Name string `json:"name"`
	}
	if m.Method == "tools/call" {
		_ = json.Unmarshal(m.Params, &p)
		h.posts[p.Name]++
	}
	n := h.posts[p.Name]
	if p.Name == "pay_lost" && n == 1 {
		h.sid = "" // the server ends the session: this request and every later one of it get 404
		h.mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
		return
	}
	h.mu.Unlock()
	if m.ID == nil || m.Method == "" { // a notification or an answer
		w.WriteHeader(http.StatusAccepted)
		return
	}
	switch {
	case m.Method == "tools/list":
		var tools []string
		for _, name := range []string{"pay_both", "pay_big", "pay_stall", "pay_lost", "pay_rpcerr", "pay_pings"} {
			tools = append(tools, fmt.Sprintf(`{"name":%q,"inputSchema":{"type":"object"}}`, name))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(response(`{"tools":[` + strings.Join(tools, ",") + `]}`))
	case p.Name == "pay_both": // a result and an error: JSON-RPC forbids both
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"charged"}]},"error":{"code":-32000,"message":"declined"}}`, m.ID)
	case p.Name == "pay_big": // an SSE data line that never ends (the server gives up at 256 MiB)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: "))
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		for range 256 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	case p.Name == "pay_stall": // a 500 whose body stalls half way
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32000,"message":"half`))
		w.(http.Flusher).Flush()
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
	case p.Name == "pay_pings": // keep-alive comments for ever: a call that never ends
		w.Header().Set("Content-Type", "text/event-stream")
		defer func() { h.pingsEnded <- struct{}{} }()
		for {
			if _, err := w.Write([]byte(": ping\n")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	case p.Name == "pay_rpcerr": // a definite failure
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"card declined"}}`, m.ID)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Write(response(fmt.Sprintf(`{"content":[{"type":"text","text":"%s done %d"}]}`, p.Name, n)))
	}
}

func readAllLimited(r *http.Request) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(http.MaxBytesReader(nil, r.Body, 1<<20))
	return b.Bytes(), err
}

// The real binary, `wrap --upstream`, in front of an upstream that misbehaves: every call ends
// with an answer (none waits on the upstream), each outcome is the one docs/gateway-backend.md
// gives, and a retry of the same call replays, runs again or is fenced as that outcome says:
//   - a result beside an error, an SSE data line past 64 MiB, a 500 whose body stalls: unknown,
//     at once; the retry is fenced and never reaches the upstream;
//   - a 404 to the session (the upstream ended it): not sent, released; the retry runs once on
//     a new session, and a later duplicate is replayed;
//   - a JSON-RPC error: a definite failure, released; the retry runs again.
func TestHostileUpstreamOutcomes(t *testing.T) {
	t.Parallel()
	h := &hostile{posts: map[string]int{}, release: make(chan struct{})}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(h.release) }) // runs first: the stalled handler ends
	ledger := filepath.Join(t.TempDir(), "l.db")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := &syncbuf.Buffer{}
	s, err := mcpstdio.Start(ctx, mcpstdio.Config{
		Command: []string{effectfence(t), "wrap", "--ledger", ledger, "--upstream", srv.URL + "/mcp"},
		Env:     append(os.Environ(), "GORACE=atexit_sleep_ms=0"), Stderr: log, InitTimeout: time.Minute,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	defer s.Close()
	posts := func(tool string) int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.posts[tool]
	}
	call := func(tool string) (string, error) {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		defer ccancel()
		res, err := s.CallTool(cctx, tool, json.RawMessage(`{"amount":4900}`))
		if cctx.Err() != nil {
			t.Fatalf("%s: no answer within a minute\n%s", tool, log.String())
		}
		return string(res), err
	}

	for _, tool := range []string{"pay_both", "pay_big", "pay_stall"} {
		res, err := call(tool)
		if err != nil || !strings.Contains(res, `"effectfence/code":"prior_failure"`) || !strings.Contains(res, "whether it took effect is unknown") {
			t.Fatalf("%s: %s %v; want the outcome unknown\n%s", tool, res, err, log.String())
		}
		again, err := call(tool)
		if err != nil || !strings.Contains(again, "NOT executed again") || posts(tool) != 1 {
			t.Fatalf("%s: the retry was answered %s %v and the upstream saw %d calls; want it fenced, one call", tool, again, err, posts(tool))
		}
	}
	if hwm := vmHWM(s.Pid()); hwm > 0 {
		t.Logf("wrap's peak resident memory after the 64 MiB+ event: %d MiB (race detector: %v)", hwm>>20, raceEnabled)
		if !raceEnabled && hwm > 1<<30 {
			t.Fatalf("wrap's peak resident memory reached %d MiB", hwm>>20)
		}
	}

	res, err := call("pay_lost")
	if err != nil || !strings.Contains(res, "the call was not sent and did not run") || !strings.Contains(res, "no longer knows the session") {
		t.Fatalf("pay_lost, the session ended by the upstream: %s %v; want not sent, for that reason\n%s", res, err, log.String())
	}
	if strings.Contains(res, "not running") {
		t.Fatalf("pay_lost: %s; the upstream is running, it ended the session", res)
	}
	if res, err = call("pay_lost"); err != nil || !strings.Contains(res, "pay_lost done 2") {
		t.Fatalf("pay_lost's retry: %s %v; want it run on a new session", res, err)
	}
	if res, err = call("pay_lost"); err != nil || !strings.Contains(res, "effectfence/replayed") || posts("pay_lost") != 2 {
		t.Fatalf("pay_lost's duplicate: %s %v, %d POSTs; want the recorded result, no new POST", res, err, posts("pay_lost"))
	}
	h.mu.Lock()
	inits := h.inits
	h.mu.Unlock()
	if inits != 2 {
		t.Fatalf("%d initializes, want 2 (one new session after the 404)", inits)
	}

	for i := 1; i <= 2; i++ {
		if _, err := call("pay_rpcerr"); err == nil || !strings.Contains(err.Error(), "card declined") || posts("pay_rpcerr") != i {
			t.Fatalf("pay_rpcerr #%d: %v, %d POSTs; want the server's error, run each time", i, err, posts("pay_rpcerr"))
		}
	}

	s.Close()
	states := ledgerStates(t, ledger)
	if states[fence.StateUnknown]+states[fence.StateFailed] != 3 || states[fence.StateDone] != 1 || states[fence.StateInFlight] != 0 {
		t.Fatalf("ledger states %v; want 3 unknown (both, big, stall), 1 done (lost's retry), none in flight", states)
	}
}

// An upstream that keeps a fenced call's stream alive with keep-alive comments for ever has
// not answered: the call waits, as for any slow tool (wrap sets no deadline on a call). When
// the agent stops wrap (stdin closed), wrap gives the call --grace, then ends the upstream
// session: the call is recorded unknown (fenced), wrap exits by itself, and the stream's
// connection is closed.
func TestHostileUpstreamPingsUntilWrapStops(t *testing.T) {
	t.Parallel()
	h := &hostile{posts: map[string]int{}, release: make(chan struct{}), pingsEnded: make(chan struct{}, 1)}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(h.release) })
	ledger := filepath.Join(t.TempDir(), "l.db")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := &syncbuf.Buffer{}
	s, err := mcpstdio.Start(ctx, mcpstdio.Config{
		Command: []string{effectfence(t), "wrap", "--ledger", ledger, "--grace", "1s", "--upstream", srv.URL + "/mcp"},
		Env:     append(os.Environ(), "GORACE=atexit_sleep_ms=0"), Stderr: log, InitTimeout: time.Minute,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	defer s.Close()
	go s.CallTool(ctx, "pay_pings", json.RawMessage(`{"amount":1}`))
	for {
		h.mu.Lock()
		n := h.posts["pay_pings"]
		h.mu.Unlock()
		if n == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the call never reached the upstream\n%s", log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Stdin closed; SIGTERM comes only after a minute. wrap ends the upstream session after
	// its --grace by itself: the stream's connection closes long before the signal.
	closed := make(chan error, 1)
	go func() { closed <- s.CloseWithin(2 * time.Minute) }()
	select {
	case <-h.pingsEnded:
	case <-time.After(45 * time.Second):
		t.Fatalf("the upstream still streams to wrap 45 s after its stdin closed (--grace 1s)\n%s", log.String())
	}
	if err := <-closed; err != nil {
		var ee *mcpstdio.ExitError
		if !errors.As(err, &ee) || !strings.Contains(ee.Why, "exited with status 0") {
			t.Fatalf("wrap did not exit by itself after stdin closed: %v\n%s", err, log.String())
		}
	}
	if states := ledgerStates(t, ledger); states[fence.StateUnknown]+states[fence.StateFailed] != 1 || len(states) != 1 {
		t.Fatalf("ledger states %v; want the one call unknown\n%s", states, log.String())
	}
}

// vmHWM is the peak resident memory of process pid in bytes (0 when /proc does not say).
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if kb, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var n int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), &n)
			return n << 10
		}
	}
	return 0
}

// ledgerStates opens the SQLite ledger at path (its wraps stopped) and counts its records by
// state.
func ledgerStates(t *testing.T, path string) map[fence.State]int {
	t.Helper()
	led, err := store.Open(context.Background(), store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	states := map[fence.State]int{}
	err = led.Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(r *fence.Record) bool { states[r.State]++; return true })
	})
	if err != nil {
		t.Fatal(err)
	}
	return states
}
