package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// The benchmarks compare a call through `effectfence wrap` (with the durable default ledger:
// a SQLite file, WAL, synchronous FULL) with a direct call to the same MCP server, in the
// same run. Every call has distinct arguments, so every call through wrap is admitted and
// committed (two durable ledger writes): the worst case, not the replay path.
//
//   go test -run '^$' -bench . -benchtime 2000x ./pkg/wrap/
//   BENCH_LEDGER=memory go test -run '^$' -bench . -benchtime 2000x ./pkg/wrap/   # the proxy alone
//   BENCH_WRAP_FLAGS="--pass echo" ...                                          # no fence at all
//   BENCH_EF_BIN=/tmp/ef-old ...             # another effectfence binary (alternate old and new builds)
//
// Each benchmark also reports wrap-cpu-µs/call: the CPU time of the wrap process (its threads'
// /proc schedstat, Linux only) over the timed wrapped calls, divided by their number. Threads
// that ended during the run are missed (the Go runtime rarely ends one).

func benchRig(b *testing.B) (direct, wrapped *mcpstdio.Session) {
	r := &rig{dir: b.TempDir(), ledger: os.Getenv("BENCH_LEDGER")} // "" is the default ledger file
	r.effects = r.dir + "/effects"
	start := func(argv []string) *mcpstdio.Session {
		s, err := mcpstdio.Start(context.Background(), mcpstdio.Config{Command: argv, Env: r.env(), Stderr: &logBuf{}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	direct = start(r.childCmd())
	bin := efBin
	if b := os.Getenv("BENCH_EF_BIN"); b != "" {
		bin = b
	}
	wrapped = start(append(append([]string{bin, "wrap"}, strings.Fields(os.Getenv("BENCH_WRAP_FLAGS"))...), append([]string{"--"}, r.childCmd()...)...))
	return direct, wrapped
}

// cpuOf returns the CPU time process pid has used so far (the sum over its threads of
// /proc/<pid>/task/*/schedstat, in nanoseconds), or 0 where that cannot be read (not Linux).
func cpuOf(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			sum += time.Duration(ns)
		}
	}
	return sum
}

// wrapCPU reports the wrap process's CPU time per wrapped call since cpu0.
func wrapCPU(b *testing.B, wrapped *mcpstdio.Session, cpu0 time.Duration, calls int) {
	if cpu0 == 0 || calls == 0 {
		return
	}
	b.ReportMetric(float64((cpuOf(wrapped.Pid())-cpu0).Microseconds())/float64(calls), "wrap-cpu-µs/call")
}

var benchSeq atomic.Int64

func echo(b *testing.B, s *mcpstdio.Session) {
	args, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), benchSeq.Add(1))})
	if _, err := s.CallTool(context.Background(), "echo", args); err != nil {
		b.Fatal(err)
	}
}

func pct(d []time.Duration, p float64) float64 {
	slices.Sort(d)
	return float64(d[int(float64(len(d)-1)*p)].Microseconds())
}

// BenchmarkLatency alternates one direct and one wrapped call per iteration and reports the
// p50 and p99 of each and the p50 that wrap adds.
func BenchmarkLatency(b *testing.B) {
	direct, wrapped := benchRig(b)
	for range 20 { // warm up both paths
		echo(b, direct)
		echo(b, wrapped)
	}
	var dl, wl []time.Duration
	cpu0 := cpuOf(wrapped.Pid())
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		echo(b, direct)
		t1 := time.Now()
		echo(b, wrapped)
		dl, wl = append(dl, t1.Sub(t0)), append(wl, time.Since(t1))
	}
	b.StopTimer()
	wrapCPU(b, wrapped, cpu0, b.N)
	d50, w50 := pct(dl, 0.5), pct(wl, 0.5)
	b.ReportMetric(d50, "direct-p50-µs")
	b.ReportMetric(pct(dl, 0.99), "direct-p99-µs")
	b.ReportMetric(w50, "wrap-p50-µs")
	b.ReportMetric(pct(wl, 0.99), "wrap-p99-µs")
	b.ReportMetric(w50-d50, "added-p50-µs")
}

// BenchmarkThroughput16 runs b.N distinct calls from 16 concurrent callers, directly and then
// through wrap, and reports both rates and their ratio.
func BenchmarkThroughput16(b *testing.B) {
	direct, wrapped := benchRig(b)
	run := func(s *mcpstdio.Session) float64 {
		var next atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					echo(b, s)
				}
			}()
		}
		wg.Wait()
		return float64(b.N) / time.Since(t0).Seconds()
	}
	run(direct) // warm up
	run(wrapped)
	b.ResetTimer()
	d := run(direct)
	cpu0 := cpuOf(wrapped.Pid())
	w := run(wrapped)
	b.StopTimer()
	wrapCPU(b, wrapped, cpu0, b.N)
	b.ReportMetric(d, "direct-calls/s")
	b.ReportMetric(w, "wrap-calls/s")
	b.ReportMetric(100*w/d, "wrap-%-of-direct")
}

// BenchmarkReplayLatency measures the duplicate path: every wrapped call repeats the first
// one and is answered from the ledger (a read, no write), against a direct call that runs.
func BenchmarkReplayLatency(b *testing.B) {
	direct, wrapped := benchRig(b)
	args := json.RawMessage(`{"text":"the same call every time"}`)
	if _, err := wrapped.CallTool(context.Background(), "echo", args); err != nil {
		b.Fatal(err)
	}
	var dl, wl []time.Duration
	cpu0 := cpuOf(wrapped.Pid())
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := direct.CallTool(context.Background(), "echo", args); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := wrapped.CallTool(context.Background(), "echo", args); err != nil {
			b.Fatal(err)
		}
		dl, wl = append(dl, t1.Sub(t0)), append(wl, time.Since(t1))
	}
	b.StopTimer()
	wrapCPU(b, wrapped, cpu0, b.N)
	b.ReportMetric(pct(dl, 0.5), "direct-p50-µs")
	b.ReportMetric(pct(wl, 0.5), "replay-p50-µs")
	b.ReportMetric(pct(wl, 0.99), "replay-p99-µs")
}
