package wrap

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
	"github.com/effectfence/effectfence/pkg/store"
)

// In-process benchmarks of one fresh fenced call through the proxy core, without the agent's
// transport: what the core and the ledger cost, against a back that answers at once (nop) and
// against the real stdio child. Each reports the p50. A SQLite file by default; memory with
// EFFECTFENCE_BENCH_LEDGER=memory:
//
//	go test -run '^$' -bench FencedCallInProcess -benchtime 1000x ./pkg/wrap
//
// On this project's 2-core VM (2026-11-30, evening, load 1-4): SQLite 0.87 ms with the nop
// back, 1.19 ms with the child. The child's round trip costs about 100 µs more after any idle
// gap, an fsync or a sleep alike (BenchmarkChildRTT): thread wake-up on this VM (issue 16).

// nopConn is a back that lists one tool, echo, and answers every call at once.
type nopConn struct{}

func (nopConn) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if method == "tools/list" {
		return json.RawMessage(`{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}`), nil
	}
	return json.RawMessage(`{"content":[{"type":"text","text":"ok"}],"isError":false}`), nil
}
func (nopConn) Notify(string, json.RawMessage) error { return nil }
func (nopConn) InitResult() json.RawMessage          { return json.RawMessage(`{}`) }

type nopBack struct{}

func (nopBack) Session(context.Context) (Conn, error) { return nopConn{}, nil }
func (nopBack) Current() Conn                         { return nopConn{} }
func (nopBack) CloseWithin(time.Duration) error       { return nil }
func (nopBack) Kill() error                           { return nil }

type discard struct{}

func (discard) Write([]byte) error { return nil }

func BenchmarkFencedCallInProcessChild(b *testing.B) {
	led, err := store.Open(context.Background(), store.Options{Ledger: ledgerFor(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer led.Close()
	exe, _ := os.Executable()
	p, err := New(Options{Command: []string{exe, "-test.run=^$"}, Env: mcptest.Env(filepath.Join(b.TempDir(), "eff"), ""), Engine: led.Engine, Log: io.Discard, Scope: "s"})
	if err != nil {
		b.Fatal(err)
	}
	p.Attach(discard{})
	im, _ := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`))
	p.initialize(context.Background(), im)
	defer p.Kill()
	var d []time.Duration
	lat0 := schedLatencies()
	for i := 0; i < b.N; i++ {
		m, _ := jsonrpc.Parse([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"f%d"}}}`, i+1, i)))
		t0 := time.Now()
		out := p.toolsCall(context.Background(), m)
		d = append(d, time.Since(t0))
		if i == 0 && !strings.Contains(string(out), "echo f0") {
			b.Fatalf("not the child's answer: %s", out)
		}
	}
	reportSchedLatencies(b, lat0)
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
}

// nopProxy is a proxy core over the benchmark's ledger with a back that answers at once,
// initialised and attached to a sink that drops what it is sent.
func nopProxy(b *testing.B) *Proxy {
	led, err := store.Open(context.Background(), store.Options{Ledger: ledgerFor(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { led.Close() })
	p, err := New(Options{Backend: func(BackendConfig) Backend { return nopBack{} }, Engine: led.Engine, Log: io.Discard, Scope: "s"})
	if err != nil {
		b.Fatal(err)
	}
	p.Attach(discard{})
	p.child = nopBack{}
	p.initDone = true
	return p
}

func BenchmarkFencedCallInProcessNop(b *testing.B) {
	b.ReportAllocs()
	p := nopProxy(b)
	var d []time.Duration
	for i := 0; i < b.N; i++ {
		m, _ := jsonrpc.Parse([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"f%d"}}}`, i, i)))
		t0 := time.Now()
		p.toolsCall(context.Background(), m)
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
}

func ledgerFor(b *testing.B) string {
	if l := os.Getenv("EFFECTFENCE_BENCH_LEDGER"); l != "" {
		return l
	}
	return filepath.Join(b.TempDir(), "l.db")
}

// BenchmarkChildRTT measures the child's round trip (mcpstdio.Session.Call of echo) after a
// gap of about 1 ms spent in different ways, to tell apart what makes the child slower when
// it sits between two fsyncing ledger transactions (issue 16): none (calls back to back),
// sleep (this process idle), spin (this process busy on the CPU), fsync (a write and fsync of
// a small file, as a ledger commit does).
//
//	go test -run '^$' -bench ChildRTT -benchtime 2000x ./pkg/wrap
func BenchmarkChildRTT(b *testing.B) {
	exe, _ := os.Executable()
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, "sync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	gaps := map[string]func(){
		"none":  func() {},
		"sleep": func() { time.Sleep(time.Millisecond) },
		"spin": func() {
			for t := time.Now(); time.Since(t) < time.Millisecond; {
			}
		},
		"fsync": func() {
			_, _ = f.WriteAt(make([]byte, 4096), 0)
			_ = f.Sync()
		},
	}
	for _, gap := range []string{"none", "sleep", "spin", "fsync"} {
		b.Run(gap, func(b *testing.B) {
			s, err := mcpstdio.Start(context.Background(), mcpstdio.Config{Command: []string{exe, "-test.run=^$"}, Env: mcptest.Env(filepath.Join(dir, "eff"), ""), Stderr: io.Discard})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var d []time.Duration
			for i := 0; i < b.N; i++ {
				gaps[gap]()
				args := json.RawMessage(fmt.Sprintf(`{"text":"r%d"}`, i))
				t0 := time.Now()
				if _, err := s.CallTool(context.Background(), "echo", args); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
			}
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// schedLatencies reads the runtime's histogram of how long goroutines waited, runnable, for a
// thread to run them.
func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64Histogram()
}

// reportSchedLatencies reports how many goroutines became runnable per op since h0, and the
// p50 and p99 of their wait for a thread (bucket upper bounds).
func reportSchedLatencies(b *testing.B, h0 *metrics.Float64Histogram) {
	h := schedLatencies()
	var n uint64
	counts := make([]uint64, len(h.Counts))
	for i := range h.Counts {
		counts[i] = h.Counts[i] - h0.Counts[i]
		n += counts[i]
	}
	if n == 0 {
		return
	}
	at := func(p float64) float64 {
		var c uint64
		for i, k := range counts {
			if c += k; float64(c) >= p*float64(n) {
				return h.Buckets[i+1] * 1e6
			}
		}
		return math.Inf(1)
	}
	b.ReportMetric(float64(n)/float64(b.N), "sched/op")
	b.ReportMetric(at(0.5), "sched-p50-µs")
	b.ReportMetric(at(0.9), "sched-p90-µs")
	b.ReportMetric(at(0.99), "sched-p99-µs")
}

// BenchmarkReplayInProcessNop measures the duplicate path through the proxy core: every call
// repeats the first one and is answered from the ledger.
//
//	go test -run '^$' -bench ReplayInProcess -benchmem ./pkg/wrap
func BenchmarkReplayInProcessNop(b *testing.B) {
	p := nopProxy(b)
	line := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"the same call every time"}}}`)
	m, _ := jsonrpc.Parse(line)
	p.toolsCall(context.Background(), m)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, _ := jsonrpc.Parse(line)
		if out := p.toolsCall(context.Background(), m); i == 0 && !strings.Contains(string(out), MetaReplayed) {
			b.Fatalf("not a replay: %s", out)
		}
	}
}
