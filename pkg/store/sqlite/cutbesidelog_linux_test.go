//go:build linux

package sqlite_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// logPages returns the page numbers of the frames of the write-ahead log at path, and the
// byte offset of the newest frame of each page.
func logPages(t *testing.T, path string) (map[uint32]int, int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 32 {
		t.Fatalf("the log: %d bytes, %v", len(b), err)
	}
	pageSize := int(binary.BigEndian.Uint32(b[8:12]))
	pages := map[uint32]int{}
	for off := 32; off+24+pageSize <= len(b); off += 24 + pageSize {
		pages[binary.BigEndian.Uint32(b[off:])] = off
	}
	return pages, pageSize
}

// TestLedgerCutInsideAPageItsLogDoesNotHoldIsRefused: a real holder commits a call and is
// killed with -9, leaving its write-ahead log beside the file; the file is then cut 1000 bytes
// short (a copy or a restore cut short), inside its last page, which the log does not hold.
// Before, a file beside a non-empty log was not measured at all: SQLite read the missing end of
// the page as zeros, integrity_check passed, and the file opened with a seeded call's record
// unreadable (its outcome lost, the intent fenced), the zeros written into the file at the next
// checkpoint. Now it is refused, unchanged, as a file cut with no log beside it is, and `ledger
// check` reports it. A file whose missing pages the log holds (a checkpoint killed after it
// wrote page 1 with the log's larger page count) still opens and keeps every record.
func TestLedgerCutInsideAPageItsLogDoesNotHoldIsRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	hash := killedCommittedHolder(t, path, 300, "charge:cut")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pages, pageSize := logPages(t, path+"-wal")
	last := uint32(len(b) / pageSize)
	if _, ok := pages[last]; ok || len(b)%pageSize != 0 {
		t.Fatalf("the file's last page %d is in the log (or the file is %d bytes): the case needs one the log does not hold", last, len(b))
	}
	if err := os.Truncate(path, int64(len(b)-1000)); err != nil {
		t.Fatal(err)
	}
	before := fileSum(t, path)
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err == nil {
		eng := fence.New(st, fence.Config{})
		var bad []string
		for i := range 300 {
			r := fence.Request{Intent: fmt.Sprintf("seed:%04d", i), Tool: "charge", Args: []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("x", 200)))}
			if adm, err := eng.Prepare(ctx, r); err != nil || adm.Fresh() {
				bad = append(bad, fmt.Sprintf("%s: fresh %v, %v", r.Intent, err == nil && adm.Fresh(), err))
			}
		}
		st.Close()
		t.Fatalf("a file cut inside a page its log does not hold opened; its seeded calls: %q", bad)
	}
	var fe *sqlite.FileError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "is truncated") || !strings.Contains(err.Error(), "effectfence ledger check") {
		t.Fatalf("opening the cut file: %v; want a FileError saying it is truncated", err)
	}
	if fileSum(t, path) != before {
		t.Fatal("the refused open changed the file")
	}
	rep, err := sqlite.Check(ctx, path)
	if err != nil || rep.OK || !strings.Contains(strings.Join(rep.Problems, " "), "is truncated") {
		t.Fatalf("ledger check of the cut file: %+v, %v", rep, err)
	}

	// The file put back whole: the holder's receipt, in the log, is replayed.
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	if adm, err := eng.Prepare(ctx, holderReq("charge:cut")); err != nil || adm.Fresh() || adm.Cert.Hash != hash {
		t.Fatalf("the file put back whole: fresh %v, %v; want the holder's receipt %s", err == nil && adm.Fresh(), err, hash)
	}

	// The state a checkpoint killed after its first write leaves: page 1 from the log, with
	// its page count, and the pages past the file's end only in the log. Not a cut: it opens.
	t.Run("missing pages in the log", func(t *testing.T) {
		live := filepath.Join(t.TempDir(), "ledger.db")
		seedLedger(t, live, 5)
		st := openT(t, live, sqlite.Options{})
		for i := range 40 {
			writeOne(t, st, fmt.Sprintf("grow:%d", i))
		}
		// The file and its log as a process killed now leaves them.
		path := filepath.Join(t.TempDir(), "ledger.db")
		copyFile(t, live, path)
		copyFile(t, live+"-wal", path+"-wal")
		st.Close()
		log, err := os.ReadFile(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		pages, pageSize := logPages(t, path+"-wal")
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		off, ok := pages[1]
		if !ok {
			t.Fatal("page 1 is not in the log: the writes did not grow the ledger")
		}
		first := log[off+24 : off+24+pageSize]
		if grown := int64(binary.BigEndian.Uint32(first[28:32])) * int64(pageSize); grown <= fi.Size() {
			t.Fatalf("the writes did not grow the file past %d bytes (%d)", fi.Size(), grown)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(first, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
		for i := range 40 {
			adm, err := eng.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("grow:%d", i), Tool: "charge", Args: []byte(`{}`)})
			if err != nil || adm.Fresh() {
				t.Fatalf("pages past the file's end held by its log: grow:%d fresh %v, %v; want it replayed", i, err == nil && adm.Fresh(), err)
			}
		}
	})
}
