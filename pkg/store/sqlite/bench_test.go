package sqlite_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	f := floorFile(b, b.TempDir(), "floor")
	defer f.Close()
	for i := 0; b.Loop(); i++ {
		writeSync(b, f, i)
	}
}

// floorFile creates the file of the fsync floor's writes (writeSync) in dir, its blocks
// allocated: the floor is an overwrite, no metadata.
func floorFile(b *testing.B, dir, name string) *os.File {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		b.Fatal(err)
	}
	for i := range 64 {
		writeSync(b, f, i)
	}
	return f
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

// BenchmarkFsyncFloorFrames is the I/O floor of a transaction that appends n WAL frames: n
// pages of 4 KB, each written as SQLite writes a frame (its 24-byte header, then the page),
// then one fsync, overwriting a file whose blocks exist (as a WAL restarted after a
// checkpoint is). "floors" is its time in units of BenchmarkFsyncFloor's, measured alongside.
// Before schema 3, a claim at body=64KB appended 13 frames and its commit 21 (the 32 KB
// claim's overflow chain was freed and the 64 KB record's written); since, the claim appends
// 14 and its commit 4, which leaves the arguments where the claim wrote them (split.go).
// At 1.1 KB, 4.6 and 4 (TestCommitKeepsArguments logs them at each body size).
func BenchmarkFsyncFloorFrames(b *testing.B) {
	for _, n := range []int{1, 4, 13, 14, 21, 22} {
		b.Run(fmt.Sprintf("frames=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			f, err := os.Create(filepath.Join(dir, "wal"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			const frame, region = 24 + 4096, 1024
			page := make([]byte, frame)
			if _, err := f.WriteAt(make([]byte, frame*region), 0); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			floor := floorBefore(b, dir)
			next := 0
			for i := 0; b.Loop(); i++ {
				for range n {
					page[0] = byte(i)
					off := int64(next%region) * frame
					if _, err := f.WriteAt(page[:24], off); err != nil {
						b.Fatal(err)
					}
					if _, err := f.WriteAt(page[24:], off+24); err != nil {
						b.Fatal(err)
					}
					next++
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			avg := (floor + fsyncFloor(b, dir)) / 2
			b.ReportMetric(float64(avg.Nanoseconds()), "floor-ns")
			b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(avg), "floors")
		})
	}
}

// fsyncFloor measures the fsync floor in dir: the mean of 100 overwrites of 128 bytes, each
// fsynced.
func fsyncFloor(b *testing.B, dir string) time.Duration {
	f := floorFile(b, dir, "floor")
	defer f.Close()
	const n = 100
	start := time.Now()
	for i := range n {
		writeSync(b, f, i)
	}
	return time.Since(start) / n
}

// floorBefore measures the fsync floor in dir before a benchmark; reportFloor measures it
// again after, and reports the mean of the two ("floor-ns") and the benchmark's time per op in
// units of it ("fsyncs/op"): a fresh admission + commit needs 2 durable commits, so the goal of
// 2x the fsyncs it needs is at most 4. On a machine whose disk others share, the two floors
// bracket the run.
func floorBefore(b *testing.B, dir string) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	return fsyncFloor(b, dir)
}

func reportFloor(b *testing.B, dir string, before time.Duration, elapsed time.Duration) {
	floor := (before + fsyncFloor(b, dir)) / 2
	b.ReportMetric(float64(floor.Nanoseconds()), "floor-ns")
	b.ReportMetric(float64(elapsed)/float64(b.N)/float64(floor), "fsyncs/op")
}

func benchEngine(b *testing.B) (*fence.Engine, *sqlite.Store, string) {
	dir := b.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	eng := fence.New(st, fence.Config{})
	b.Cleanup(func() { eng.Close() })
	return eng, st, dir
}

// bodySizes are the sizes of a done record's body the benchmarks run at: the smallest record
// the engine writes ("min": a 0.5 KB claim that becomes a 0.8 KB done record, like the
// project's examples), a typical call through wrap (1.1 KB: over the ~1 KB that a 4 KB page
// keeps in an index b-tree cell), a page's worth and a large tool result.
var bodySizes = []struct {
	name  string
	bytes int
}{{"min", 0}, {"1.1KB", 1126}, {"4KB", 4096}, {"64KB", 65536}}

// bencher admits and commits distinct intents whose done records are about a given size.
type bencher struct {
	eng  *fence.Engine
	st   *sqlite.Store
	dir  string
	args []byte // the call's arguments, padded so that the record reaches its size
	body int    // the size of a done record's body (reported as body-bytes)

	// idAt, when not 0, is where the digits of a call id sit in args: each call numbers its
	// own copy of the arguments, so no two calls send the same bytes (newDistinctBencher).
	idAt int

	// result is what every call commits (smallResult unless newResultBencher set another).
	result []byte
}

// smallResult is the result the benchers commit unless told otherwise: a card charged.
var smallResult = []byte(`{"charge":"ch_1","status":"succeeded"}`)

// newBencher opens a ledger and pads the arguments so that a done record's body (which holds
// the arguments twice, in the record and in its cert) is about size bytes; the size reached is
// reported as body-bytes. Every call sends the same arguments, as retries and repeated calls
// do: the engine's cache of canonical arguments answers for them.
func newBencher(b *testing.B, size int) *bencher {
	return newBencherArgs(b, size, padArgs)
}

// newDistinctBencher is newBencher for calls whose arguments all differ (in a call id), as
// fresh calls' do: each is canonicalised and hashed.
func newDistinctBencher(b *testing.B, size int) *bencher {
	z := newBencherArgs(b, size, padArgsID)
	z.idAt = bytes.Index(z.args, []byte(`"id":"`)) + len(`"id":"`)
	return z
}

func newBencherArgs(b *testing.B, size int, pad func(int) []byte) *bencher {
	eng, st, dir := benchEngine(b)
	z := &bencher{eng: eng, st: st, dir: dir, args: pad(0)}
	z.admitCommit(b, "bench:calibrate")
	base := z.bodyBytes(b)
	z.args = pad(max(0, (size-base)/2))
	z.admitCommit(b, "bench:calibrated")
	z.body = z.bodyBytes(b)
	return z
}

func padArgs(n int) []byte {
	return []byte(fmt.Sprintf(`{"amount":4900,"currency":"eur","memo":%q}`, strings.Repeat("x", n)))
}

func padArgsID(n int) []byte {
	return []byte(fmt.Sprintf(`{"amount":4900,"currency":"eur","id":"000000000","memo":%q}`, strings.Repeat("x", n)))
}

// bodyBytes is the size of the largest record body in the ledger, read on a connection of its
// own.
func (z *bencher) bodyBytes(b *testing.B) int {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(z.dir, "ledger.db")+"?mode=ro")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	// A split body (schema 3) is shorter than the record it stands for: its whole size counts.
	rows, err := db.QueryContext(ctx, "SELECT body FROM records")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			b.Fatal(err)
		}
		n = max(n, sqlite.WholeSize(body))
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}

// distinctArgs returns the arguments for the next call: z.args, numbered with a call id of
// their own for a bencher of newDistinctBencher.
func (z *bencher) distinctArgs() []byte {
	if z.idAt == 0 {
		return z.args
	}
	args := bytes.Clone(z.args)
	id := strconv.AppendUint(nil, idCounter.Add(1), 10)
	copy(args[z.idAt+9-len(id):z.idAt+9], id)
	return args
}

func (z *bencher) admitCommit(b *testing.B, intent string) {
	adm, err := z.eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge_card", Args: z.distinctArgs(), Agent: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	result := z.result
	if result == nil {
		result = smallResult
	}
	if _, err := z.eng.Commit(ctx, *adm.Ticket, result); err != nil {
		b.Fatal(err)
	}
}

// ioCounts reads this process's read and write system call counts (Linux /proc/self/io; zeros
// elsewhere). Per op they show how many pread and pwrite calls SQLite makes for a decision.
func ioCounts() (reads, writes int64) {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

func reportIO(b *testing.B, z *bencher, r0, w0 int64) {
	b.ReportMetric(float64(z.body), "body-bytes")
	r1, w1 := ioCounts()
	if r1 == 0 && w1 == 0 {
		return
	}
	b.ReportMetric(float64(r1-r0)/float64(b.N), "reads/op")
	b.ReportMetric(float64(w1-w0)/float64(b.N), "writes/op")
}

// BenchmarkAdmitCommit is one goroutine admitting and committing distinct intents: the
// latency of a fresh, durable decision plus its durable outcome (two fsynced transactions), at
// each body size.
func BenchmarkAdmitCommit(b *testing.B) { benchAdmitCommit(b, newBencher) }

// benchAdmitCommit runs one goroutine's admissions and commits at each body size, on the
// benchers newZ makes.
func benchAdmitCommit(b *testing.B, newZ func(*testing.B, int) *bencher) {
	for _, bs := range bodySizes {
		b.Run("body="+bs.name, func(b *testing.B) { benchSerial(b, newZ(b, bs.bytes)) })
	}
}

// benchSerial runs z's admissions and commits b.N times on one goroutine.
func benchSerial(b *testing.B, z *bencher) {
	floor := floorBefore(b, z.dir)
	r0, w0 := ioCounts()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		z.admitCommit(b, fmt.Sprintf("bench:%d", i))
	}
	b.StopTimer()
	reportIO(b, z, r0, w0)
	reportFloor(b, z.dir, floor, b.Elapsed())
}

// resultSizes are the sizes of the results BenchmarkAdmitCommitResult commits: a page's worth
// and a large tool result (a file read, a web page, a query's rows).
var resultSizes = []struct {
	name  string
	bytes int
}{{"4KB", 4096}, {"64KB", 65536}}

// newResultBencher is newBencher for calls with small arguments whose results are size bytes:
// an MCP tool result, a text content block of JSON-escaped text, as tools return files and
// pages. The arguments are the benchmarks' smallest; body-bytes reports what a done record
// of such a call takes in the ledger.
func newResultBencher(b *testing.B, size int) *bencher {
	eng, st, dir := benchEngine(b)
	z := &bencher{eng: eng, st: st, dir: dir, args: padArgs(0)}
	const line = "a line of the file, with \"quotes\", a tab\tand its newline\n"
	for n := size / (len(line) + 4); len(z.result) < size; n++ { // each line is 4 bytes longer escaped
		doc, err := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": strings.Repeat(line, n)}}})
		if err != nil {
			b.Fatal(err)
		}
		z.result = doc
	}
	z.admitCommit(b, "bench:calibrated")
	z.body = z.bodyBytes(b)
	return z
}

// BenchmarkAdmitCommitResult is BenchmarkAdmitCommit for calls whose size is in their result
// (result=64KB: a 64 KB tool result), as large calls usually are: a claim holds the small
// arguments, and the commit writes the result.
func BenchmarkAdmitCommitResult(b *testing.B) {
	for _, rs := range resultSizes {
		b.Run("result="+rs.name, func(b *testing.B) { benchSerial(b, newResultBencher(b, rs.bytes)) })
	}
}

// idCounter numbers the calls of newDistinctBencher's benchers.
var idCounter atomic.Uint64

// BenchmarkAdmitCommitDistinctArgs is BenchmarkAdmitCommit with arguments that differ from
// call to call (in a call id), as fresh calls' do: no cache of canonical arguments helps.
func BenchmarkAdmitCommitDistinctArgs(b *testing.B) { benchAdmitCommit(b, newDistinctBencher) }

// BenchmarkAdmitCommitParallel16 is 16 goroutines admitting and committing distinct intents
// (b.N in total); group commit shares each fsync among the transactions that arrive while
// another commits. Compare ns/op with BenchmarkAdmitCommit for the throughput ratio.
func BenchmarkAdmitCommitParallel16(b *testing.B) {
	for _, bs := range bodySizes {
		b.Run("body="+bs.name, func(b *testing.B) { benchParallel16(b, newBencher(b, bs.bytes)) })
	}
}

// BenchmarkAdmitCommitResultParallel16 is BenchmarkAdmitCommitParallel16 for the calls of
// BenchmarkAdmitCommitResult, whose size is in their result.
func BenchmarkAdmitCommitResultParallel16(b *testing.B) {
	for _, rs := range resultSizes {
		b.Run("result="+rs.name, func(b *testing.B) { benchParallel16(b, newResultBencher(b, rs.bytes)) })
	}
}

// benchParallel16 runs z's admissions and commits b.N times on 16 goroutines.
func benchParallel16(b *testing.B, z *bencher) {
	var next atomic.Int64
	floor := floorBefore(b, z.dir)
	r0, w0 := ioCounts()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				z.admitCommit(b, fmt.Sprintf("bench:%d", i))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	reportIO(b, z, r0, w0)
	reportFloor(b, z.dir, floor, b.Elapsed())
}

// BenchmarkReplay is a duplicate of a committed intent answered from the durable store: a read
// transaction, no write, no fsync.
func BenchmarkReplay(b *testing.B) {
	for _, bs := range bodySizes {
		b.Run("body="+bs.name, func(b *testing.B) {
			z := newBencher(b, bs.bytes)
			req := fence.Request{Intent: "bench:calibrated", Tool: "charge_card", Args: z.args, Agent: "bench"}
			r0, w0 := ioCounts()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				adm, err := z.eng.Prepare(ctx, req)
				if err != nil || adm.Fresh() {
					b.Fatalf("replay: %+v %v", adm, err)
				}
			}
			b.StopTimer()
			reportIO(b, z, r0, w0)
		})
	}
}

// BenchmarkReplayUnseen is a duplicate of a committed intent that this engine has not seen
// recorded (another process, or this one before a restart, recorded it): a WriteFirst store
// answers it from the write transaction, which writes nothing and so fsyncs nothing.
func BenchmarkReplayUnseen(b *testing.B) {
	z := newBencher(b, 0)
	for i := 0; i < b.N; i++ {
		z.admitCommit(b, fmt.Sprintf("bench:%d", i))
	}
	other := fence.New(z.st, fence.Config{})
	r0, w0 := ioCounts()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		adm, err := other.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("bench:%d", i), Tool: "charge_card", Args: z.args, Agent: "bench"})
		if err != nil || adm.Fresh() {
			b.Fatalf("replay: %+v %v", adm, err)
		}
	}
	b.StopTimer()
	reportIO(b, z, r0, w0)
}
