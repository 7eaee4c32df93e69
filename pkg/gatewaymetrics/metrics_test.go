package gatewaymetrics_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/gatewaymetrics"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// The proxy under test runs in this process; its MCP server is this test binary re-executed
// (mcptest), a real child over real pipes.
func TestMain(m *testing.M) {
	mcptest.MaybeServe()
	os.Exit(m.Run())
}

// scrape fetches the handler's text output and returns every sample by its series, e.g.
// `effectfence_tool_calls_total{code="none",outcome="executed"}`.
func scrape(t *testing.T, m *gatewaymetrics.Metrics) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("scrape: status %d, content type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("scrape: unreadable sample %q", line)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// series returns the series of a metric name.
func series(samples map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range samples {
		if k == name || strings.HasPrefix(k, name+"{") {
			out[k] = v
		}
	}
	return out
}

// agent is the agent's end of an in-process wrap.Proxy: it sends requests through Dispatch
// and receives the answers the proxy writes to its Sink.
type agent struct {
	p      *wrap.Proxy
	mu     sync.Mutex
	wait   map[string]chan *jsonrpc.Message
	nextID atomic.Int64
}

func (a *agent) Write(line []byte) error {
	m, err := jsonrpc.Parse(append([]byte(nil), line...))
	if err != nil {
		return err
	}
	if !m.IsResponse() {
		return nil // notifications and the server's requests are not needed here
	}
	a.mu.Lock()
	ch := a.wait[string(m.ID)]
	delete(a.wait, string(m.ID))
	a.mu.Unlock()
	if ch != nil {
		ch <- m
	}
	return nil
}

func (a *agent) request(t *testing.T, method, params string) *jsonrpc.Message {
	t.Helper()
	id := strconv.FormatInt(a.nextID.Add(1), 10)
	ch := make(chan *jsonrpc.Message, 1)
	a.mu.Lock()
	a.wait[id] = ch
	a.mu.Unlock()
	a.p.Dispatch(jsonrpc.Request(json.RawMessage(id), method, json.RawMessage(params)))
	select {
	case m := <-ch:
		return m
	case <-time.After(60 * time.Second):
		t.Fatalf("no answer to %s %s", method, params)
		return nil
	}
}

func (a *agent) call(t *testing.T, tool, args string) *jsonrpc.Message {
	t.Helper()
	q, _ := json.Marshal(tool)
	return a.request(t, "tools/call", `{"name":`+string(q)+`,"arguments":`+args+`}`)
}

// lockedLog is a goroutine-safe log for the proxy.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// startProxy runs a wrap.Proxy over the mcptest server, observed by observe.
func startProxy(t *testing.T, e *fence.Engine, observe func(wrap.CallEvent)) *agent {
	t.Helper()
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := &lockedLog{}
	p, err := wrap.New(wrap.Options{
		Command: []string{exe, "-test.run=^$"},
		Env:     mcptest.Env(filepath.Join(dir, "effects"), ""),
		Engine:  e, Log: log, Observe: observe, Scope: "gatewaymetrics-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{p: p, wait: map[string]chan *jsonrpc.Message{}}
	p.Attach(a)
	t.Cleanup(func() {
		p.Stop("test over")
		if t.Failed() {
			log.mu.Lock()
			t.Logf("wrap log:\n%s", log.b.String())
			log.mu.Unlock()
		}
	})
	if m := a.request(t, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"metrics-test","version":"1"}}`); m.Error != nil {
		t.Fatalf("initialize: %v", m.Error)
	}
	p.Dispatch(jsonrpc.Notification("notifications/initialized", nil))
	return a
}

// TestProxyEventsMoveTheCounters drives a real proxy through every outcome of a tools/call
// and checks that the scraped counters and histograms say what the proxy reported, and that
// the engine's own counters are exported.
func TestProxyEventsMoveTheCounters(t *testing.T) {
	m := gatewaymetrics.New("charge")
	e := fence.New(fence.NewMemoryStore(), fence.Config{})
	m.WatchEngine(e)
	var mu sync.Mutex
	var events []wrap.CallEvent
	a := startProxy(t, e, func(ev wrap.CallEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
		m.Observe(ev)
	})

	a.call(t, "charge", `{"amount":1,"order":"o-1"}`) // executed
	a.call(t, "charge", `{"amount":1,"order":"o-1"}`) // replayed
	a.call(t, "balance", `{}`)                        // passed (read-only)
	a.request(t, "tools/call", `{"name":5}`)          // invalid
	a.call(t, "no such tool \u2603 {}\"", `{}`)       // executed, rpc_error
	var wg sync.WaitGroup                             // one executed is_error,
	for range 4 {                                     // the others coalesced
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.call(t, "fail", `{"ms":400,"tag":"m"}`)
		}()
	}
	wg.Wait()
	a.call(t, "die", `{"tag":"m"}`) // unknown: the server exits mid-call
	a.call(t, "die", `{"tag":"m"}`) // refused: prior_failure

	mu.Lock()
	want := map[[2]string]int{}
	for _, ev := range events {
		code := ev.Code
		if code == "" {
			code = gatewaymetrics.NoCode
		}
		want[[2]string{ev.Outcome, code}]++
	}
	n := len(events)
	mu.Unlock()
	if n != 11 {
		t.Fatalf("the proxy reported %d tools/call events, want 11: %v", n, events)
	}
	for _, oc := range [][2]string{
		{"executed", "none"}, {"replayed", "none"}, {"passed", "none"}, {"invalid", "none"},
		{"executed", "rpc_error"}, {"executed", "is_error"}, {"coalesced", "is_error"},
		{"unknown", "none"}, {"refused", fence.CodePriorFailure},
	} {
		if want[oc] == 0 {
			t.Errorf("the proxy never reported outcome %s with code %s: %v", oc[0], oc[1], want)
		}
	}

	got := scrape(t, m)
	calls := series(got, "effectfence_tool_calls_total")
	for oc, k := range want {
		key := fmt.Sprintf(`effectfence_tool_calls_total{code=%q,outcome=%q}`, oc[1], oc[0])
		if calls[key] != float64(k) {
			t.Errorf("%s = %v, want %d", key, calls[key], k)
		}
	}
	counted := 0
	for k, v := range calls {
		if v != 0 {
			counted++
		} else if !strings.Contains(k, `code="none"`) {
			t.Errorf("%s exists at zero: only code none is made in advance", k)
		}
	}
	if counted != len(want) {
		t.Errorf("tool_calls_total has %d counted series, want %d: %v", counted, len(want), calls)
	}
	var histTotal float64
	for outcome := range map[string]bool{"executed": true, "replayed": true, "passed": true, "invalid": true, "coalesced": true, "unknown": true, "refused": true} {
		c := got[fmt.Sprintf(`effectfence_tool_call_duration_seconds_count{outcome=%q}`, outcome)]
		inf := got[fmt.Sprintf(`effectfence_tool_call_duration_seconds_bucket{outcome=%q,le="+Inf"}`, outcome)]
		if c == 0 || c != inf {
			t.Errorf("latency histogram of %s: count %v, +Inf bucket %v", outcome, c, inf)
		}
		histTotal += c
	}
	if histTotal != float64(n) {
		t.Errorf("latency histograms hold %v observations, want %d", histTotal, n)
	}
	if got[`effectfence_tool_call_duration_seconds_sum{outcome="coalesced"}`] < 0.1 {
		t.Errorf("coalesced calls waited for a 400 ms attempt, yet their latency sum is %v s", got[`effectfence_tool_call_duration_seconds_sum{outcome="coalesced"}`])
	}
	byTool := series(got, "effectfence_tool_calls_by_tool_total")
	if byTool[`effectfence_tool_calls_by_tool_total{outcome="executed",tool="charge"}`] != 1 || byTool[`effectfence_tool_calls_by_tool_total{outcome="replayed",tool="charge"}`] != 1 {
		t.Errorf("per-tool counts of the named tool charge are wrong: %v", byTool)
	}
	for k := range byTool {
		if !strings.Contains(k, `tool="charge"`) && !strings.Contains(k, `tool="other"`) {
			t.Errorf("a tool the operator did not name has a series of its own: %s", k)
		}
	}

	// The engine's counters: charge admitted once and replayed once, fail admitted once,
	// the rpc_error tool admitted, die admitted then refused.
	st, err := e.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.SinceBoot.Admitted == 0 || st.SinceBoot.Replayed == 0 {
		t.Fatalf("the engine counted nothing: %+v", st.SinceBoot)
	}
	checks := map[string]uint64{
		`effectfence_fence_attempts_total{result="admitted"}`:              st.SinceBoot.Admitted,
		`effectfence_fence_attempts_total{result="replayed"}`:              st.SinceBoot.Replayed,
		`effectfence_fence_attempts_total{result="refused_prior_failure"}`: st.SinceBoot.PriorFailure,
		`effectfence_ledger_attempts_total{result="admitted"}`:             st.Ledger.Admitted,
		`effectfence_ledger_up`:                                            1,
	}
	for k, v := range checks {
		if got[k] != float64(v) {
			t.Errorf("%s = %v, want %d", k, got[k], v)
		}
	}
	if got[`effectfence_fence_attempts_total{result="refused_prior_failure"}`] == 0 {
		t.Errorf("the refused die call is not in the engine's counters")
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Errorf("the Go runtime collector is missing")
	}
}

// TestHostileLabelsAddNoSeries feeds events, methods and statuses no gateway emits (random
// bytes, invalid UTF-8, huge strings) and checks that the series stay within the fixed sets.
func TestHostileLabelsAddNoSeries(t *testing.T) {
	m := gatewaymetrics.New("charge", "bad\xffname")
	rng := rand.New(rand.NewPCG(1, 2))
	junk := func() string {
		b := make([]byte, rng.IntN(300))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	for i := range 5000 {
		ev := wrap.CallEvent{Tool: junk(), Outcome: junk(), Code: junk(), Elapsed: time.Duration(rng.Int64N(int64(time.Minute)))}
		if i%3 == 0 {
			ev.Outcome = gatewaymetrics.Outcomes[i%len(gatewaymetrics.Outcomes)]
		}
		m.Observe(ev)
		m.HTTP(junk(), rng.IntN(2000)-500)
	}
	m.Observe(wrap.CallEvent{Tool: "bad\xffname", Outcome: "executed"})
	m.Observe(wrap.CallEvent{Tool: "charge", Outcome: "executed", Code: "is_error\n"})
	got := scrape(t, m)

	allowed := func(label, value string) bool {
		switch label {
		case "outcome":
			return value == gatewaymetrics.Other || contains(gatewaymetrics.Outcomes, value)
		case "code":
			return value == gatewaymetrics.Other || value == gatewaymetrics.NoCode || contains(gatewaymetrics.Codes, value)
		case "tool":
			return value == "charge" || value == gatewaymetrics.Other
		case "method":
			return value == gatewaymetrics.Other || contains([]string{"GET", "POST", "DELETE", "HEAD", "OPTIONS", "PUT", "PATCH"}, value)
		case "class":
			return value == gatewaymetrics.Other || contains([]string{"1xx", "2xx", "3xx", "4xx", "5xx"}, value)
		case "le":
			return true
		}
		return false
	}
	n := 0
	for k := range got {
		if !strings.HasPrefix(k, "effectfence_tool_call") && !strings.HasPrefix(k, "effectfence_http_") {
			continue
		}
		n++
		labels := k[strings.IndexByte(k, '{')+1 : len(k)-1]
		for _, kv := range strings.Split(labels, ",") {
			name, value, _ := strings.Cut(kv, "=")
			value, err := strconv.Unquote(value)
			if err != nil || !allowed(name, value) {
				t.Errorf("series %s carries label %s=%q from the input", k, name, value)
			}
		}
	}
	// At most: calls 8 outcomes x 15 codes, histograms 8 x (18 buckets + +Inf + sum + count),
	// by tool 2 x 8, http 8 x 6.
	if limit := 8*15 + 8*21 + 2*8 + 8*6; n > limit || n == 0 {
		t.Fatalf("%d series after hostile input, bound %d", n, limit)
	}
	if got[`effectfence_tool_calls_by_tool_total{outcome="executed",tool="charge"}`] != 1 {
		t.Errorf("the named tool's call with a hostile code was not counted once under its name")
	}
	if got[`effectfence_tool_calls_total{code="other",outcome="other"}`] == 0 || got[`effectfence_http_requests_total{class="other",method="other"}`] == 0 {
		t.Errorf("hostile input was not counted as other")
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func TestSessionsAndHTTP(t *testing.T) {
	m := gatewaymetrics.New()
	m.SessionOpened()
	m.SessionOpened()
	m.SessionOpened()
	m.SessionClosed()
	m.HTTP("POST", 200)
	m.HTTP("post", 202)
	m.HTTP("GET", 405)
	m.HTTP("DELETE", 503)
	m.HTTP("BREW", 418)
	m.HTTP("GET", 99)
	got := scrape(t, m)
	for k, v := range map[string]float64{
		"effectfence_sessions_open":                                    2,
		"effectfence_sessions_opened_total":                            3,
		`effectfence_http_requests_total{class="2xx",method="POST"}`:   2,
		`effectfence_http_requests_total{class="4xx",method="GET"}`:    1,
		`effectfence_http_requests_total{class="5xx",method="DELETE"}`: 1,
		`effectfence_http_requests_total{class="4xx",method="other"}`:  1,
		`effectfence_http_requests_total{class="other",method="GET"}`:  1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(series(got, "effectfence_tool_calls_by_tool_total")) != 0 {
		t.Errorf("per-tool series exist though no tool was named")
	}
	// Before any call, every outcome has its series at zero (an alert on the first unknown
	// outcome needs the series to exist before it).
	for _, o := range gatewaymetrics.Outcomes {
		k := fmt.Sprintf(`effectfence_tool_calls_total{code="none",outcome=%q}`, o)
		if v, ok := got[k]; !ok || v != 0 {
			t.Errorf("%s: %v, %v; want present at 0", k, v, ok)
		}
		if v, ok := got[fmt.Sprintf(`effectfence_tool_call_duration_seconds_count{outcome=%q}`, o)]; !ok || v != 0 {
			t.Errorf("latency of %s not present at 0", o)
		}
	}
	if len(series(got, "effectfence_fence_attempts_total")) != 0 {
		t.Errorf("engine counters exported before WatchEngine")
	}
}

// failingStore is a store whose reads fail on demand: the ledger being down.
type failingStore struct {
	fence.Store
	down atomic.Bool
}

func (s *failingStore) View(ctx context.Context, fn func(fence.Tx) error) error {
	if s.down.Load() {
		return errors.New("ledger unreachable")
	}
	return s.Store.View(ctx, fn)
}

func TestLedgerDownStillExportsThisProcess(t *testing.T) {
	st := &failingStore{Store: fence.NewMemoryStore()}
	e := fence.New(st, fence.Config{})
	ctx := context.Background()
	if _, err := e.Prepare(ctx, fence.Request{Intent: "i-1", Tool: "t", Args: json.RawMessage(`{}`), Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	m := gatewaymetrics.New()
	m.WatchEngine(e)
	if got := scrape(t, m); got["effectfence_ledger_up"] != 1 || got[`effectfence_fence_attempts_total{result="admitted"}`] != 1 || got[`effectfence_ledger_attempts_total{result="admitted"}`] != 1 {
		t.Fatalf("ledger up: %v", series(got, "effectfence_"))
	}
	st.down.Store(true)
	got := scrape(t, m)
	if got["effectfence_ledger_up"] != 0 || got[`effectfence_fence_attempts_total{result="admitted"}`] != 1 {
		t.Fatalf("ledger down: want ledger_up 0 and this process's counts, got %v", series(got, "effectfence_"))
	}
	if len(series(got, "effectfence_ledger_attempts_total")) != 0 {
		t.Fatalf("ledger totals exported while the ledger does not answer")
	}
	m.WatchEngine(nil)
	if got := scrape(t, m); len(series(got, "effectfence_fence_attempts_total")) != 0 {
		t.Fatalf("engine counters still exported after WatchEngine(nil)")
	}
}

var _ io.Writer = (*lockedLog)(nil)
