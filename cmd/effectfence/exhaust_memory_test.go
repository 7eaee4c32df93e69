package main

import (
	"bytes"
	"context"
	"encoding/json"
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
)

// bulky is a Streamable HTTP MCP server whose one tool, pay_bulky, answers every call with a
// result of about 60 MiB: valid, under the 64 MiB a message may have, as JSON for an even
// argument n and as an event stream for an odd one. It counts the calls that reached it.
type bulky struct {
	text  []byte // the result's text, shared by every answer
	mu    sync.Mutex
	calls int
}

func (b *bulky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, _ := readAllLimited(r)
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Arguments struct {
				N int `json:"n"`
			} `json:"arguments"`
		} `json:"params"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if m.ID == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Mcp-Session-Id", "bulky")
	head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":`, m.ID)
	switch m.Method {
	case "initialize":
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(head + `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"bulky","version":"1"}}}`))
	case "tools/list":
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(head + `{"tools":[{"name":"pay_bulky","inputSchema":{"type":"object"}}]}}`))
	case "tools/call":
		b.mu.Lock()
		b.calls++
		b.mu.Unlock()
		parts := [][]byte{[]byte(head + `{"content":[{"type":"text","text":"`), b.text, []byte(`"}]}}`)}
		if m.Params.Arguments.N%2 == 1 {
			w.Header().Set("Content-Type", "text/event-stream")
			parts = append([][]byte{[]byte("data: ")}, append(parts, []byte("\n\n"))...)
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		for _, p := range parts {
			if _, err := w.Write(p); err != nil {
				return
			}
		}
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(head + `{}}`))
	}
}

// Eight calls at once through the real binary, `wrap --upstream`, each answered with about
// 60 MiB (4 MiB under the race detector, which reads them ten times slower). Each call reached
// the upstream once and ends done or unknown (never "not run"), its answer given to the agent
// whole or the call fenced. Without the race detector (whose shadow memory is not wrap's),
// wrap's peak resident memory stays far below what it took before the answer budget
// (httpback.AnswerBudget): 2.2 GiB then, about 1 GiB now.
func TestConcurrentBulkyAnswersKeepTheBudget(t *testing.T) {
	t.Parallel()
	const calls = 8
	size := 60 << 20
	if raceEnabled {
		size = 4 << 20
	}
	b := &bulky{text: bytes.Repeat([]byte("b"), size)}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
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
	type answer struct {
		res string
		err error
	}
	answers := make([]answer, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
			defer ccancel()
			res, err := s.CallTool(cctx, "pay_bulky", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)))
			answers[i] = answer{string(res), err}
		}()
	}
	wg.Wait()
	hwm := vmHWM(s.Pid())
	done, unknown := 0, 0
	for i, a := range answers {
		switch {
		case a.err == nil && strings.Contains(a.res, strings.Repeat("b", 1000)) && len(a.res) > size:
			done++
		case a.err == nil && strings.Contains(a.res, `"effectfence/code":"prior_failure"`) && strings.Contains(a.res, "whether it took effect is unknown"):
			unknown++
		default:
			t.Errorf("call %d: answered %.300s, %v; want its whole result or its outcome unknown", i, a.res, a.err)
		}
	}
	t.Logf("%d done, %d unknown; wrap's peak resident memory %d MiB (race detector: %v)", done, unknown, hwm>>20, raceEnabled)
	b.mu.Lock()
	reached := b.calls
	b.mu.Unlock()
	if reached != calls {
		t.Errorf("%d calls reached the upstream, want %d", reached, calls)
	}
	if done == 0 {
		t.Errorf("no call was answered with its result")
	}
	if !raceEnabled && hwm > 1536<<20 {
		t.Errorf("wrap's peak resident memory reached %d MiB for %d answers of %d MiB", hwm>>20, calls, size>>20)
	}
	s.Close()
	states := ledgerStates(t, ledger)
	if states[fence.StateDone] != done || states[fence.StateUnknown]+states[fence.StateFailed] != unknown || states[fence.StateInFlight] != 0 {
		t.Errorf("ledger states %v; want %d done, %d unknown, none in flight", states, done, unknown)
	}
}
