package sqlite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// The benchmarks run on the disk that holds the test's temporary directory; set TMPDIR to
// measure another. Compare each against BenchmarkFsyncFloor from the same run: a fresh
// admission + commit needs two durable transactions, so its floor is two fsyncs.

// BenchmarkFsyncFloor writes 128 bytes and fsyncs them: the cost of one durable write on this
// disk, the floor under every transaction.
func BenchmarkFsyncFloor(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "floor"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for i := range 64 { // allocate the blocks first: the floor is an overwrite, no metadata
		writeSync(b, f, i)
	}
	for i := 0; b.Loop(); i++ {
		writeSync(b, f, i)
	}
}

func writeSync(b *testing.B, f *os.File, i int) {
	buf := make([]byte, 128)
	buf[0] = byte(i)
	if _, err := f.WriteAt(buf, int64(i%64)*128); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
}

// reportFloor measures the fsync floor in dir right after the benchmark and reports the
// benchmark's time per op in units of that floor ("fsyncs/op"): a fresh admission + commit
// needs 2, so the target of 2x the fsyncs it needs is at most 4.
func reportFloor(b *testing.B, dir string, elapsed time.Duration) {
	f, err := os.Create(filepath.Join(dir, "floor"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for i := range 64 { // allocate the blocks first: the floor is an overwrite, no metadata
		writeSync(b, f, i)
	}
	const n = 200
	start := time.Now()
	for i := range n {
		writeSync(b, f, i)
	}
	floor := time.Since(start) / n
	b.ReportMetric(float64(floor.Nanoseconds()), "floor-ns")
	b.ReportMetric(float64(elapsed)/float64(b.N)/float64(floor), "fsyncs/op")
}

func benchEngine(b *testing.B) (*fence.Engine, string) {
	dir := b.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	eng := fence.New(st, fence.Config{})
	b.Cleanup(func() { eng.Close() })
	return eng, dir
}

func admitCommit(b *testing.B, eng *fence.Engine, intent string) {
	adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge_card", Args: []byte(`{"amount":4900,"currency":"eur"}`), Agent: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1","status":"succeeded"}`)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAdmitCommit is one goroutine admitting and committing distinct intents: the
// latency of a fresh, durable decision plus its durable outcome (two fsynced transactions).
func BenchmarkAdmitCommit(b *testing.B) {
	eng, dir := benchEngine(b)
	for i := 0; b.Loop(); i++ {
		admitCommit(b, eng, fmt.Sprintf("bench:%d", i))
	}
	reportFloor(b, dir, b.Elapsed())
}

// BenchmarkAdmitCommitParallel16 is 16 goroutines admitting and committing distinct intents
// (b.N in total); group commit shares each fsync among the transactions that arrive while
// another commits. Compare ns/op with BenchmarkAdmitCommit for the throughput ratio.
func BenchmarkAdmitCommitParallel16(b *testing.B) {
	eng, dir := benchEngine(b)
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				admitCommit(b, eng, fmt.Sprintf("bench:%d", i))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	reportFloor(b, dir, b.Elapsed())
}

// BenchmarkReplay is a duplicate of a committed intent answered from the durable store: a read
// transaction, no write, no fsync.
func BenchmarkReplay(b *testing.B) {
	eng, _ := benchEngine(b)
	admitCommit(b, eng, "bench:done")
	req := fence.Request{Intent: "bench:done", Tool: "charge_card", Args: []byte(`{"amount":4900,"currency":"eur"}`), Agent: "bench"}
	for b.Loop() {
		adm, err := eng.Prepare(ctx, req)
		if err != nil || adm.Fresh() {
			b.Fatalf("replay: %+v %v", adm, err)
		}
	}
}
