package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestViewLetsGoOfTheLedgerWhileItsReaderPauses: `ledger ls | less`, left open. The reader
// takes the first screenful and stops; the view must still end its read transaction (a
// SQLite ledger's write-ahead log could not be checkpointed past it, and would grow with
// every call the fleet makes; a PostgreSQL ledger would keep a connection and a snapshot),
// keep the rest of its report in a temporary file no other user can read and no directory
// shows, and give the reader all of it, whole and in order, when it reads on.
func TestViewLetsGoOfTheLedgerWhileItsReaderPauses(t *testing.T) {
	t.Parallel()
	// One record's reason of 990 characters widens every row of the table to over 1 KB: each
	// view of 2,000 records is over 2 MB, more than the pipe and the report's memory hold.
	const n = 2000
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			loc := filepath.Join(t.TempDir(), "ledger.db")
			if kind == "postgres" {
				loc = pgLedger(t)
			}
			l, err := store.Open(ctx, store.Options{Ledger: loc})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			putWrapRecords(t, l.Store(), 0, n)
			err = l.Store().Update(ctx, func(tx fence.Tx) error {
				r, err := tx.Get(lsIntent(9)) // unknown, with a reason
				if err == nil && r == nil {
					// (PostgreSQL's first, speculative try of a transaction reads no record:
					// the error sends it to its transaction.)
					err = fmt.Errorf("no record %s", lsIntent(9))
				}
				if err != nil {
					return err
				}
				r.Reason = strings.Repeat("the holder died mid-call; ", 38)
				return tx.Put(r)
			})
			if err != nil {
				t.Fatal(err)
			}
			added := n
			views := []struct {
				name string
				args []string
				read func(r io.Reader, n int) (int, error)
			}{
				{"ls", []string{"ls"}, func(r io.Reader, n int) (int, error) { return readLsTable(r, n, lsIntent) }},
				{"ls --json", []string{"ls", "--json"}, func(r io.Reader, _ int) (int, error) { return readLsJSON(r, lsIntent) }},
				{"export", []string{"export"}, func(r io.Reader, _ int) (int, error) { return readExportRecords(r) }},
			}
			for _, v := range views {
				t.Run(v.name, func(t *testing.T) {
					n := added // what the ledger holds as the view starts
					viewLoc, app := loc, ""
					if kind == "postgres" {
						// The view's connections, told apart from every other test's.
						app = fmt.Sprintf("effectfence-pause-%d-%d", os.Getpid(), time.Now().UnixNano())
						u, err := url.Parse(loc)
						if err != nil {
							t.Fatal(err)
						}
						q := u.Query()
						q.Set("application_name", app)
						u.RawQuery = q.Encode()
						viewLoc = u.String()
					}
					tmp := t.TempDir()
					pr, pw, err := os.Pipe()
					if err != nil {
						t.Fatal(err)
					}
					defer pr.Close()
					cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
					defer cancel()
					cmd := exec.CommandContext(cctx, effectfence(t), append(append([]string{"ledger"}, v.args...), "--ledger", viewLoc)...)
					cmd.Env = append(os.Environ(), "NO_COLOR=1", "TMPDIR="+tmp, store.EnvLedger+"=")
					var stderr lockedBuffer // read while the view runs
					cmd.Stdout, cmd.Stderr = pw, &stderr
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					pw.Close()
					exited := make(chan error, 1)
					go func() { exited <- cmd.Wait() }()

					// The first screenful, then nothing.
					first := make([]byte, 4096)
					if _, err := io.ReadFull(pr, first); err != nil {
						t.Fatalf("reading the view's first 4 KiB: %v; stderr:\n%s", err, stderr.String())
					}
					var let bool
					for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
						// A call recorded meanwhile, in the log the view's snapshot predates.
						putWrapRecords(t, l.Store(), added, added+1)
						added++
						if kind == "sqlite" {
							let = checkpointed(t, loc)
						} else {
							let = !connected(t, app)
						}
						if let {
							break
						}
					}
					if !let {
						t.Fatalf("ledger %s still holds the ledger a minute after its reader paused; stderr:\n%s", v.name, stderr.String())
					}
					select {
					case err := <-exited:
						t.Fatalf("ledger %s exited (%v) before its reader read the report", v.name, err)
					default:
					}
					// The rest waits in a file of the view's own: no directory names it, and it
					// is its owner's alone.
					if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
						t.Errorf("TMPDIR holds %v (%v): the report's copy must not be left in a directory", ents, err)
					}
					if mode, ok := spoolMode(cmd.Process.Pid, tmp); !ok {
						t.Errorf("no deleted temporary file under %s is open in the view's process", tmp)
					} else if mode.Perm() != 0o600 {
						t.Errorf("the report's temporary copy has mode %v; want 0600", mode.Perm())
					}

					rest := &countingReader{r: pr}
					got, err := v.read(io.MultiReader(bytes.NewReader(first), rest), n)
					t.Logf("ledger %s: %d records, %d bytes", v.name, n, int64(len(first))+rest.n)
					if err != nil || got != n {
						t.Fatalf("ledger %s after the pause: %d of %d records: %v; stderr:\n%s", v.name, got, n, err, stderr.String())
					}
					if err := <-exited; err != nil {
						t.Fatalf("ledger %s: %v; stderr:\n%s", v.name, err, stderr.String())
					}
				})
			}
		})
	}
}

// checkpointed says whether the ledger's write-ahead log could be copied into the file and
// emptied: no reader holds a snapshot in it.
func checkpointed(t *testing.T, path string) bool {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var busy, log, done int64
	if err := db.QueryRow("PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &log, &done); err != nil {
		t.Fatal(err)
	}
	return busy == 0 && log == 0
}

// connected says whether a connection of application app is open to the server.
func connected(t *testing.T, app string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("EFFECTFENCE_TEST_POSTGRES"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var k int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&k); err != nil {
		t.Fatal(err)
	}
	return k > 0
}

// spoolMode finds, among the files process pid has open, a deleted one that was made in dir,
// and returns its mode.
func spoolMode(pid int, dir string) (os.FileMode, bool) {
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fds)
	if err != nil {
		return 0, false
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(fds, e.Name()))
		if err != nil || !strings.HasPrefix(target, dir+string(filepath.Separator)) || !strings.HasSuffix(target, " (deleted)") {
			continue
		}
		if fi, err := os.Stat(filepath.Join(fds, e.Name())); err == nil {
			return fi.Mode(), true
		}
	}
	return 0, false
}

// readExportRecords reads `ledger export`'s JSON Lines and counts the records among them.
func readExportRecords(r io.Reader) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	records := 0
	for sc.Scan() {
		var line map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return records, fmt.Errorf("line %q: %v", sc.Text(), err)
		}
		if _, ok := line["record"]; ok {
			records++
		}
	}
	return records, sc.Err()
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}
