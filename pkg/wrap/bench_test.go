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
// /proc schedstat, Linux only) over the timed wrapped calls, divided by their number, and
// wrap-switches/call, its threads' context switches the same way. Threads that ended during the
// run are missed (the Go runtime rarely ends one).

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

// switchesOf returns how many times process pid's threads have left the CPU so far, voluntarily
// (to sleep or wait) or not (the sum over /proc/<pid>/task/*/status), or 0 where that cannot be
// read. On a VM where a context switch is dear (this project's 2-core VM spends about a third
// of wrap's CPU switching threads), it counts what the Go scheduler and the system calls cost
// beyond the instructions.
func switchesOf(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				sum += n
			}
		}
	}
	return sum
}

// faultsOf returns how many minor page faults process pid has taken so far (field 10 of
// /proc/<pid>/stat, all its threads), or 0 where that cannot be read. On a VM whose page
// faults are dear (a PVM guest takes about 12 µs per fault), a Go heap that the runtime's
// scavenger gives back to the kernel between calls and then touches again costs per call.
func faultsOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, field 2, is in parentheses and may hold spaces: count after it.
	_, rest, ok := strings.Cut(string(b), ") ")
	if f := strings.Fields(rest); ok && len(f) > 7 {
		n, _ := strconv.ParseInt(f[7], 10, 64)
		return n
	}
	return 0
}

// usage is what the wrap process has used so far: CPU time, context switches and minor page
// faults.
type usage struct {
	cpu      time.Duration
	switches int64
	faults   int64
}

func usageOf(pid int) usage { return usage{cpuOf(pid), switchesOf(pid), faultsOf(pid)} }

// wrapCPU reports the wrap process's CPU time and context switches per wrapped call since u0.
func wrapCPU(b *testing.B, wrapped *mcpstdio.Session, u0 usage, calls int) {
	if u0.cpu == 0 || calls == 0 {
		return
	}
	u := usageOf(wrapped.Pid())
	b.ReportMetric(float64((u.cpu-u0.cpu).Microseconds())/float64(calls), "wrap-cpu-µs/call")
	if u0.switches > 0 {
		b.ReportMetric(float64(u.switches-u0.switches)/float64(calls), "wrap-switches/call")
	}
	if u0.faults > 0 {
		b.ReportMetric(float64(u.faults-u0.faults)/float64(calls), "wrap-faults/call")
	}
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
	u0 := usageOf(wrapped.Pid())
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		echo(b, direct)
		t1 := time.Now()
		echo(b, wrapped)
		dl, wl = append(dl, t1.Sub(t0)), append(wl, time.Since(t1))
	}
	b.StopTimer()
	wrapCPU(b, wrapped, u0, b.N)
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
	u0 := usageOf(wrapped.Pid())
	w := run(wrapped)
	b.StopTimer()
	wrapCPU(b, wrapped, u0, b.N)
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
	u0 := usageOf(wrapped.Pid())
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
	wrapCPU(b, wrapped, u0, b.N)
	b.ReportMetric(pct(dl, 0.5), "direct-p50-µs")
	b.ReportMetric(pct(wl, 0.5), "replay-p50-µs")
	b.ReportMetric(pct(wl, 0.99), "replay-p99-µs")
}
