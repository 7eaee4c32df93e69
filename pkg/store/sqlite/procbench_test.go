//go:build linux

package sqlite_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// procBenchHelper is one process of BenchmarkProcesses: after the file EFFECTFENCE_TEST_GO
// appears it admits and commits EFFECTFENCE_TEST_N distinct wrap-sized intents (1.1 KB done
// records) one after another, pausing EFFECTFENCE_TEST_THINK between claim and commit (the
// tool call), and prints the microseconds each decision's two transactions took, sorted.
func procBenchHelper() error {
	n, err := strconv.Atoi(os.Getenv("EFFECTFENCE_TEST_N"))
	if err != nil {
		return err
	}
	think, err := time.ParseDuration(os.Getenv("EFFECTFENCE_TEST_THINK"))
	if err != nil {
		return err
	}
	st, err := sqlite.Open(ctx, os.Getenv("EFFECTFENCE_TEST_LEDGER"), sqlite.Options{})
	if err != nil {
		return err
	}
	eng := fence.New(st, fence.Config{})
	defer eng.Close()
	args := padArgs(400)
	fmt.Println("ready")
	for {
		if _, err := os.Stat(os.Getenv("EFFECTFENCE_TEST_GO")); err == nil {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	us := make([]int64, 0, n)
	for i := range n {
		t0 := time.Now()
		adm, err := eng.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("proc:%d:%d", os.Getpid(), i), Tool: "charge_card", Args: args, Agent: "bench"})
		if err != nil {
			return err
		}
		spent := time.Since(t0)
		time.Sleep(think)
		t1 := time.Now()
		if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1","status":"succeeded"}`)); err != nil {
			return err
		}
		us = append(us, (spent + time.Since(t1)).Microseconds())
	}
	slices.Sort(us)
	fmt.Println(strings.Trim(fmt.Sprint(us), "[]"))
	return nil
}

// BenchmarkProcesses runs 2 and 4 processes deciding calls on one ledger file at once, as the
// wraps of several MCP clients do (SPEC: the normal multi-agent case), back to back and with a
// 1 ms tool call between claim and commit. b.N is each process's number of decisions. It
// reports the time of a decision's two transactions (think time excluded) at p50, p99 and
// max over all processes, the decisions per second of all together, and the slowest
// process's share of the fastest one's (1 = even turns).
func BenchmarkProcesses(b *testing.B) {
	for _, procs := range []int{2, 4} {
		for _, think := range []time.Duration{0, time.Millisecond} {
			b.Run(fmt.Sprintf("procs=%d/think=%v", procs, think), func(b *testing.B) {
				benchProcesses(b, procs, think)
			})
		}
	}
}

func benchProcesses(b *testing.B, procs int, think time.Duration) {
	dir := b.TempDir()
	ledger := filepath.Join(dir, "ledger.db")
	openT(b, ledger, sqlite.Options{}).Close()
	gofile := filepath.Join(dir, "go")
	var outs []*bufio.Scanner
	for range procs {
		_, out, _ := queueProc(b, ledger, "procbench", "EFFECTFENCE_TEST_N="+strconv.Itoa(b.N),
			"EFFECTFENCE_TEST_THINK="+think.String(), "EFFECTFENCE_TEST_GO="+gofile)
		if !out.Scan() || out.Text() != "ready" {
			b.Fatalf("process: %q %v", out.Text(), out.Err())
		}
		outs = append(outs, out)
	}
	b.ResetTimer()
	t0 := time.Now()
	if err := os.WriteFile(gofile, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	type done struct {
		line string
		at   time.Duration
		err  error
	}
	results := make(chan done, procs)
	for _, out := range outs {
		go func() {
			if !out.Scan() {
				results <- done{err: fmt.Errorf("no result: %v", out.Err())}
				return
			}
			results <- done{line: out.Text(), at: time.Since(t0)}
		}()
	}
	var all []int64
	var ends []time.Duration
	for range procs {
		r := <-results
		if r.err != nil {
			b.Fatal(r.err)
		}
		ends = append(ends, r.at)
		for _, f := range strings.Fields(r.line) {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			all = append(all, v)
		}
	}
	b.StopTimer()
	slices.Sort(all)
	slices.Sort(ends)
	b.ReportMetric(float64(all[len(all)/2]), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100]), "p99-µs")
	b.ReportMetric(float64(all[len(all)-1]), "max-µs")
	b.ReportMetric(float64(len(all))/ends[len(ends)-1].Seconds(), "decisions/s")
	// Each process prints when it is done; the first to finish over the last is how evenly
	// they were served.
	b.ReportMetric(ends[0].Seconds()/ends[len(ends)-1].Seconds(), "first/last-done")
}
