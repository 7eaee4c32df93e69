package sqlite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// closeHolder ends a holder process cleanly: it closes its store.
func closeHolder(t *testing.T, h *holderProc) {
	t.Helper()
	if err := h.in.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
}

// wantReceipts fails the test unless a store opened at path replays each intent's receipt.
func wantReceipts(t *testing.T, when, path string, hashes map[string]string) {
	t.Helper()
	st := openT(t, path, sqlite.Options{})
	defer st.Close()
	eng := fence.New(st, fence.Config{})
	for intent, hash := range hashes {
		adm, err := eng.Prepare(ctx, holderReq(intent))
		if err != nil || adm.Fresh() || adm.Cert.Hash != hash {
			t.Fatalf("%s, %s at %s: fresh %v, %v; want its receipt %s", when, intent, path, err == nil && adm.Fresh(), err, hash)
		}
	}
}

// TestLedgerMovedBackBesideItsSettledLogIsRefused: a real holder commits, its file is moved
// (mv A B) and the holder closes, copying its log into the moved file and leaving the log
// beside A, marked settled. A second holder commits under B and closes. Then the file is put
// back at A, as the refusal of A (no file beside a log) advises. Opening A, SQLite applied the
// old log over the newer pages: the call committed under B was answered as new (it would run
// again), and quick_check saw nothing. Now A is refused, saying to remove the old log (and
// A's refusal while the file was away no longer says to move that log beside the moved
// file); ledger check reports it; with the old log removed as advised, both receipts replay.
func TestLedgerMovedBackBesideItsSettledLogIsRefused(t *testing.T) {
	dir := t.TempDir()
	path, moved := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "moved.db")
	openT(t, path, sqlite.Options{}).Close() // a ledger used before under this name
	h, hash := committedHolder(t, path, "back:1")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	closeHolder(t, h)
	if _, err := os.Stat(path + "-wal.settled"); err != nil {
		t.Fatalf("the holder closed after its file moved: %v; want its log marked settled", err)
	}
	_, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err == nil || !strings.Contains(err.Error(), "old write-ahead log") || strings.Contains(err.Error(), "mv "+path+"-wal") {
		t.Fatalf("the old name, the file away: %v; want it refused, not advising to move the old log beside the moved file", err)
	}

	h2, hash2 := committedHolder(t, moved, "back:2")
	closeHolder(t, h2)
	if err := os.Rename(moved, path); err != nil { // put back
		t.Fatal(err)
	}
	rm := fmt.Sprintf("rm %[1]s-wal %[1]s-shm %[1]s-wal.settled", path)
	refusedOpen(t, "put back beside its settled log after it was used elsewhere", path, "back:2", "old write-ahead log", rm)
	rep, err := sqlite.Check(ctx, path)
	if err != nil || rep.OK || rep.Kind != "log of another file" || !strings.Contains(strings.Join(rep.Advice, " "), rm) {
		t.Fatalf("ledger check of the file put back: %+v, %v", rep, err)
	}
	for _, suffix := range []string{"-wal", "-shm", "-wal.settled"} {
		if err := os.Remove(path + suffix); err != nil {
			t.Fatal(err)
		}
	}
	wantReceipts(t, "the old log removed as advised", path, map[string]string{"back:1": hash, "back:2": hash2})
}

// TestLedgerMovedBackUnchangedBesideItsSettledLogOpens: the way out a store whose file moved
// advises (put the file back) still opens when nothing used the file elsewhere: the settled
// log's mark records the moved file as it was right after the log was copied into it, and the
// file put back is that file, unchanged, so the log holds nothing it lacks.
func TestLedgerMovedBackUnchangedBesideItsSettledLogOpens(t *testing.T) {
	dir := t.TempDir()
	path, moved := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "moved.db")
	openT(t, path, sqlite.Options{}).Close()
	h, hash := committedHolder(t, path, "unchanged:1")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	closeHolder(t, h)
	if err := os.Rename(moved, path); err != nil {
		t.Fatal(err)
	}
	wantReceipts(t, "put back unchanged", path, map[string]string{"unchanged:1": hash})
}

// TestLedgerPutInPlaceOfOneStillOpenIsRefused: a real holder has its ledger open at A and has
// committed; its file is moved away (mv A B) and another ledger file is put at A while the
// holder still writes its log beside A. SQLite, opening A, would apply the holder's log to the
// other file. Refused, naming the process, and so is ledger check's report; once the holder
// closed (its log copied into its own file and marked settled), A is refused again (the
// settled log is another file's), and with the old log removed as advised it opens, while
// the holder's receipt replays in its own file at B.
func TestLedgerPutInPlaceOfOneStillOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	path, moved, other := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "moved.db"), filepath.Join(dir, "other.db")
	openT(t, path, sqlite.Options{}).Close()
	openT(t, other, sqlite.Options{}).Close()
	h, hash := committedHolder(t, path, "live:1")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("process %d uses that log", h.cmd.Process.Pid)
	refusedOpen(t, "another file put in place of the holder's", path, "live:1", "is not the file whose write-ahead log is beside it", want)
	rep, err := sqlite.Check(ctx, path)
	if err != nil || rep.OK || rep.Kind != "log of another file" || !strings.Contains(strings.Join(rep.Problems, " "), want) {
		t.Fatalf("ledger check of the file put in place: %+v, %v", rep, err)
	}

	closeHolder(t, h)
	refusedOpen(t, "the holder closed", path, "live:1", "old write-ahead log")
	for _, suffix := range []string{"-wal", "-shm", "-wal.settled"} {
		if err := os.Remove(path + suffix); err != nil {
			t.Fatal(err)
		}
	}
	openT(t, path, sqlite.Options{}).Close()
	wantReceipts(t, "the holder closed", moved, map[string]string{"live:1": hash})
}
