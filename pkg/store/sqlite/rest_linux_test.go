package sqlite_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// besideLedger lists the write-ahead log and index that are beside the ledger at path.
func besideLedger(path string) []string {
	var there []string
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if _, err := os.Lstat(p); err == nil {
			there = append(there, filepath.Base(p))
		}
	}
	return there
}

// TestCheckLeavesNothingBesideALedgerAtRest: docs/ledger.md, `ledger check` changes nothing.
// Before 2026-12-06 its read-only open of a ledger that no process had open left an empty
// log and an index beside it (LEDGER-wal, LEDGER-shm), which the next process to open the
// ledger took as its own; beside a read-only file, a read-only index, which refused that
// process once the file was writable again (TestReadOnlyIndexLeftByACheckIsNamed). A ledger at
// rest is now read as an immutable file. One that a process has open (a real holder, its
// claim only in its log) is read as before: its log and index are its own, the claim is
// counted, and the holder goes on to commit.
func TestCheckLeavesNothingBesideALedgerAtRest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedLedger(t, path, 3)
	if there := besideLedger(path); len(there) > 0 {
		t.Fatalf("the seeded ledger, closed, has %v beside it", there)
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		r, err := sqlite.Check(ctx, path)
		if err != nil || !r.OK || r.States["done"] != 3 {
			t.Fatalf("ledger check of the ledger at rest (mode %o): %v %+v; want it OK with 3 done records", mode, err, r)
		}
		if there := besideLedger(path); len(there) > 0 {
			t.Errorf("ledger check of the ledger at rest (mode %o) left %v beside it", mode, there)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHolder(t, path, "held", time.Minute, false, nil)
	r, err := sqlite.Check(ctx, path)
	if err != nil || !r.OK || r.States["in_flight"] != 1 || r.States["done"] != 3 {
		t.Fatalf("ledger check with a holder on the ledger: %v %+v; want it OK, with the holder's claim", err, r)
	}
	if there := besideLedger(path); len(there) != 2 {
		t.Fatalf("beside the ledger its holder has open: %v; want its log and index", there)
	}
	if got := h.say("commit"); !strings.HasPrefix(got, "committed ") {
		t.Fatalf("the holder, after the check: %q; want its commit", got)
	}
}

// TestLedgerOpenedDuringACheckAtRestIsSeen: a process that opens a ledger while Check reads it
// as at rest (immutable: SQLite neither locks nor looks at a log) may change the pages read,
// and Check then reads it again as a process using it does. It is seen while it has the
// ledger open (its lock on the file), and after it has closed it too: Check's shared lock
// keeps it from closing as the last connection, which would delete its log and index.
func TestLedgerOpenedDuringACheckAtRestIsSeen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedLedger(t, path, 1)
	f := sqlite.RestingReader(path)
	if f == nil {
		t.Fatal("the seeded ledger, closed, is not taken to be at rest")
	}
	defer f.Close()
	if !sqlite.StillAtRest(f, path) {
		t.Fatal("the ledger, unopened, is not still at rest")
	}
	h := startHolder(t, path, "held", time.Minute, false, nil)
	if sqlite.StillAtRest(f, path) {
		t.Fatal("a process has the ledger open, and it is taken to be at rest")
	}
	if got := h.say("commit"); !strings.HasPrefix(got, "committed ") {
		t.Fatalf("the holder: %q; want its commit", got)
	}
	h.in.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("the holder's end: %v", err)
	}
	if sqlite.StillAtRest(f, path) {
		t.Fatal("a process opened the ledger, committed and closed it, and it is taken to be at rest")
	}
	if r := sqlite.RestingReader(path); r != nil {
		r.Close()
		t.Fatal("a ledger with the log its last process left is taken to be at rest")
	}
}

// TestCheckThroughALinkReadsTheLogOfAKilledHolder: SQLite keeps a ledger's log beside the file
// a symbolic link leads to, not beside the link. A holder killed (kill -9) after its commit
// leaves that commit in the log and no lock on the file: a check given the link must not take
// the ledger for one at rest, which it reads without its log, and must count the commit.
func TestCheckThroughALinkReadsTheLogOfAKilledHolder(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "real"), 0o700); err != nil {
		t.Fatal(err)
	}
	path, link := filepath.Join(dir, "real", "ledger.db"), filepath.Join(dir, "link.db")
	seedLedger(t, path, 1)
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	h := startHolder(t, path, "held", time.Minute, false, nil)
	if got := h.say("commit"); !strings.HasPrefix(got, "committed ") {
		t.Fatalf("the holder: %q; want its commit", got)
	}
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the killed holder left no log with its commit (%v, %v)", err, fi)
	}
	r, err := sqlite.Check(ctx, link)
	if err != nil || !r.OK || r.States["done"] != 2 {
		t.Fatalf("ledger check through the link: %v %+v; want both done records, the killed holder's from the log", err, r)
	}
}
