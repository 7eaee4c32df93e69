package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/postgres"
)

// lsIntent names the i-th record putWrapRecords writes: intent order is index order.
func lsIntent(i int) string { return fmt.Sprintf("wrap:memory-probe:%07d", i) }

// putWrapRecords writes the records from to to (exclusive) through the store, a transaction
// per 20,000 (SQLite) or 1,000 (PostgreSQL): each the size of a wrap record, about 1.1 KB
// (arguments of 0.45 KB, a read set, a vector clock; a done one's cert with its own copy of
// the arguments and a result; every tenth one fenced unknown with a reason instead), and
// every hundredth one with 3.2 KB of arguments (which SQLite keeps apart from the record and
// joins back as it reads).
func putWrapRecords(t *testing.T, st fence.Store, from, to int) {
	t.Helper()
	ctx := context.Background()
	chunk := 20000
	if _, ok := st.(*postgres.Store); ok {
		chunk = 1000 // a lock per intent written: 20,000 exhaust PostgreSQL's lock table
	}
	pad := strings.Repeat("lorem ipsum dolor sit amet ", 15)
	for lo := from; lo < to; lo += chunk {
		hi := min(lo+chunk, to)
		err := st.Update(ctx, func(tx fence.Tx) error {
			now := tx.Now()
			for i := lo; i < hi; i++ {
				intent := lsIntent(i)
				obs := pad
				if i%100 == 50 {
					obs = strings.Repeat(pad, 7)
				}
				args := fmt.Appendf(nil, `{"entities":[{"entityType":"order","name":"order-%07d","observations":[%q]}]}`, i, obs)
				rec := &fence.Record{Intent: intent, State: fence.StateDone, Fingerprint: fmt.Sprintf("%064x", i), Token: uint64(i + 1),
					Nonce: fmt.Sprintf("%032x", i), Owner: "host-a:4242:1733300000", Agent: "agent-7", Tool: "create_entities", Args: args,
					ReadSet: []fence.ReadSetEntry{{Domain: "orders", Seq: uint64(i)}}, Clock: fence.VectorClock{"agent-7": uint64(i + 1)},
					ClaimedAt: now, LeaseUntil: now.Add(time.Minute), UpdatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
				if i%10 == 9 {
					rec.State, rec.ExpiresAt, rec.Reason = fence.StateUnknown, time.Time{}, "the holder died mid-call"
				} else {
					rec.Cert = &fence.Cert{Intent: intent, Tool: rec.Tool, Args: args, Agent: rec.Agent, Result: []byte(`{"content":[{"type":"text","text":"created 1 entity"}]}`),
						Hash: fmt.Sprintf("%064x", i+1)}
				}
				if err := tx.Put(rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// copyWrapRecords makes the records from to to (exclusive) of a PostgreSQL ledger holding
// records 0 to from-1 of putWrapRecords: each a copy of the stored row of record i % from,
// the intent renamed in its columns and in its body (the record's and its cert's), by one
// INSERT … SELECT (writing them through the store takes a round trip each).
func copyWrapRecords(t *testing.T, loc string, from, to int) {
	t.Helper()
	ctx := context.Background()
	conn, table := pgDirect(t, loc, "effectfence_records")
	prefix := strings.TrimSuffix(lsIntent(0), "0000000")
	_, err := conn.Exec(ctx, `INSERT INTO `+table+` (intent, state, expires_at, cert_hash, body)
		SELECT n.intent, r.state, r.expires_at, r.cert_hash || '-' || n.i,
			convert_to(replace(convert_from(r.body, 'UTF8'), '"' || r.intent || '"', '"' || n.intent || '"'), 'UTF8')
		FROM `+table+` r
		JOIN (SELECT i, $1 || lpad(i::text, 7, '0') AS intent FROM generate_series($2::int, $3::int - 1) i) n
			ON r.intent = $1 || lpad((n.i % $2::int)::text, 7, '0')`, prefix, from, to)
	if err != nil {
		t.Fatal(err)
	}
}

// lsPeak runs `effectfence ledger ls` of the plain binary with args on the ledger at loc,
// checks that what it writes lists n records, the k-th of them nth(k), each once, in order, and
// returns the process's peak resident memory in KiB: VmHWM of /proc/PID/status, read every
// few milliseconds while it runs (the high-water mark only rises, so the last read is the
// peak but for what the process took in its last few milliseconds). (getrusage's ru_maxrss
// would not do: a child's starts at the memory of the process that started it, this test.)
func lsPeak(t *testing.T, loc string, n int, nth func(int) string, args ...string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, plainBinary(t), append([]string{"ledger", "ls", "--ledger", loc}, args...)...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", store.EnvLedger+"=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop, polled := make(chan struct{}), make(chan int64)
	go func() {
		var peak int64
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		for {
			if b, err := os.ReadFile(status); err == nil {
				for line := range strings.SplitSeq(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
						var kb int64
						if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
							peak = max(peak, kb)
						}
					}
				}
			}
			select {
			case <-stop:
				polled <- peak
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	started := time.Now()
	defer func() { t.Logf("ledger ls %q of %d records: %v", args, n, time.Since(started).Round(time.Millisecond)) }()
	var listed int
	var bad error
	if len(args) > 0 && args[0] == "--json" {
		listed, bad = readLsJSON(out, nth)
	} else {
		listed, bad = readLsTable(out, n, nth)
	}
	_, _ = io.Copy(io.Discard, out)
	// The process is not reaped before Wait: its pid names it until then.
	close(stop)
	peak := <-polled
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("ledger ls %q did not finish in 3 minutes", args)
	}
	if err != nil || bad != nil || listed != n || peak == 0 {
		t.Fatalf("ledger ls %q: %v; listed %d of %d: %v; peak %d KiB; stderr:\n%s", args, err, listed, n, bad, peak, stderr.String())
	}
	return peak
}

// readLsTable reads the `ledger ls` table: its count line, then rows whose intents must be
// nth(0) to nth(n-1).
func readLsTable(r io.Reader, n int, nth func(int) string) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if !sc.Scan() || !strings.HasSuffix(sc.Text(), fmt.Sprintf(": %d intent(s)", n)) {
		return 0, fmt.Errorf("first line %q", sc.Text())
	}
	rows, header := 0, false
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "│")
		if len(cells) < 3 {
			continue // a rule
		}
		if !header {
			header = true
			continue
		}
		if got := strings.TrimSpace(cells[1]); got != nth(rows) {
			return rows, fmt.Errorf("row %d lists %q, want %q", rows, got, nth(rows))
		}
		rows++
	}
	return rows, sc.Err()
}

// readLsJSON decodes the `ledger ls --json` document as a stream: its records' intents must be
// nth(0), nth(1) and on (the caller checks how many), and nothing may be unreadable.
func readLsJSON(r io.Reader, nth func(int) string) (int, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	expect := func(want json.Delim) error {
		tok, err := dec.Token()
		if err == nil && tok != want {
			err = fmt.Errorf("%v where %v was due", tok, want)
		}
		return err
	}
	if err := expect('{'); err != nil {
		return 0, err
	}
	listed := 0
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return listed, err
		}
		switch key {
		case "ledger":
			var loc string
			if err := dec.Decode(&loc); err != nil {
				return listed, err
			}
		case "records":
			if err := expect('['); err != nil {
				return listed, err
			}
			for dec.More() {
				var rec struct {
					Intent string `json:"intent"`
				}
				if err := dec.Decode(&rec); err != nil {
					return listed, err
				}
				if rec.Intent != nth(listed) {
					return listed, fmt.Errorf("record %d is %q, want %q", listed, rec.Intent, nth(listed))
				}
				listed++
			}
			if err := expect(']'); err != nil {
				return listed, err
			}
		default:
			return listed, fmt.Errorf("unexpected member %v", key)
		}
	}
	return listed, expect('}')
}

// TestLedgerLsMemoryDoesNotGrowWithTheLedger: `ledger ls`, `ls --json` and `ls --state done`
// of the real binary over a real ledger (a SQLite file; a PostgreSQL schema) of wrap-sized
// records take no more than 1.5 times the peak memory at 10 times the records (measured: 1.0 to
// 1.1 times, about 31 to 43 MB, at 3,000 and at 30,000 records). Before, ls held a copy of
// every record it listed (ledger.List), then the table or the document, so its memory grew
// with the ledger, which is a day of a busy fleet's calls (millions of records): at 30,000
// records 160 to 470 MB, 3 to 6 times what it took at 3,000. Every record is still listed
// once, in order.
func TestLedgerLsMemoryDoesNotGrowWithTheLedger(t *testing.T) {
	const small, big = 3000, 30000
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			loc := filepath.Join(t.TempDir(), "ledger.db")
			if kind == "postgres" {
				loc = pgLedger(t)
			}
			ctx := context.Background()
			// put writes through the store, closed before ls runs: the last connection to close
			// a SQLite ledger checkpoints its write-ahead log, which every open reads whole
			// (the transactions of 20,000 records leave 40 MB of it): ls is measured over the
			// ledger's records, not over what a writer left in the log.
			put := func(from, to int) {
				l, err := store.Open(ctx, store.Options{Ledger: loc})
				if err != nil {
					t.Fatal(err)
				}
				putWrapRecords(t, l.Store(), from, to)
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			put(0, small)
			peak := map[string][2]int64{}
			runs := [][]string{{}, {"--json"}, {"--state", "done"}}
			measure := func(slot, n int) {
				for _, args := range runs {
					p := peak[strings.Join(args, " ")]
					if len(args) > 0 && args[0] == "--state" {
						// Nine in ten are done: every record but each tenth.
						p[slot] = lsPeak(t, loc, n/10*9, func(k int) string { return lsIntent(k/9*10 + k%9) }, args...)
					} else {
						p[slot] = lsPeak(t, loc, n, lsIntent, args...)
					}
					peak[strings.Join(args, " ")] = p
				}
			}
			measure(0, small)
			if kind == "postgres" {
				copyWrapRecords(t, loc, small, big)
			} else {
				put(small, big)
			}
			measure(1, big)
			for _, args := range runs {
				p := peak[strings.Join(args, " ")]
				t.Logf("ledger ls %s: peak RSS %d KiB at %d records, %d KiB at %d", strings.Join(args, " "), p[0], small, p[1], big)
				if p[1]*2 > p[0]*3 {
					t.Errorf("ledger ls %s took %d KiB at %d records and %d KiB at %d: it grows with the ledger", strings.Join(args, " "), p[0], small, p[1], big)
				}
			}
		})
	}
}
