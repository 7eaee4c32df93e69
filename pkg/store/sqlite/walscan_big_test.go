package sqlite

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Every open of a ledger scans its write-ahead log for damage. The log can be far larger than
// the ledger (a reader holding a snapshot, or a process stopped inside one, keeps SQLite from
// checkpointing it), and the scan read it whole into memory: a 43 MB log made `ledger ls`
// peak at 120 MB instead of 42 MB, and a log of gigabytes would take that much from every
// wrap that starts. Here a real log of about 35 MB (SQLite's own, autocheckpoint off) is
// scanned, whole and with one page flipped deep inside it: the scan allocates less than 1 MB,
// and still finds the damage and the frame it is at.
func TestWriteAheadLogScanHoldsOneFrame(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(wal)&_pragma=wal_autocheckpoint(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("CREATE TABLE t (b BLOB)"); err != nil {
		t.Fatal(err)
	}
	blob := []byte(strings.Repeat("x", 3000))
	for i := range 3000 { // one transaction each: a commit frame every frame or two
		if _, err := db.Exec("INSERT INTO t VALUES (?)", append(blob, fmt.Sprint(i)...)); err != nil {
			t.Fatal(err)
		}
	}
	wal := path + "-wal"
	fi, err := os.Stat(wal)
	if err != nil || fi.Size() < 20<<20 {
		t.Fatalf("the log is %v (%v); want one of at least 20 MB", fi, err)
	}
	allocs := func(f func()) uint64 {
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		f()
		runtime.ReadMemStats(&b)
		return b.TotalAlloc - a.TotalAlloc
	}
	var what string
	if n := allocs(func() { what, err = walDamageOf(wal) }); err != nil || what != "" || n > 1<<20 {
		t.Fatalf("scan of a sound %d MB log: %q, %v, %d bytes allocated; want no damage, under 1 MB", fi.Size()>>20, what, err, n)
	}

	// A copy with one byte flipped in the page of a frame deep in the log.
	b, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	const frame = 5000
	pageSize := int(b[8])<<24 | int(b[9])<<16 | int(b[10])<<8 | int(b[11])
	if frames := (len(b) - walHeaderSize) / (walFrameHeaderSize + pageSize); frames < frame+100 {
		t.Fatalf("the log holds %d frames; want more than %d", frames, frame+100)
	}
	b[walHeaderSize+frame*(walFrameHeaderSize+pageSize)+walFrameHeaderSize+100] ^= 0xff
	damaged := filepath.Join(dir, "damaged-wal")
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	b = nil
	if n := allocs(func() { what, err = walDamageOf(damaged) }); err != nil || !strings.Contains(what, fmt.Sprintf("damaged at frame %d of its write-ahead log", frame)) || n > 1<<20 {
		t.Fatalf("scan of the log damaged at frame %d: %q, %v, %d bytes allocated", frame, what, err, n)
	}
}
