package sqlite_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestScanPageIsBoundedInBytes: a Scan holds a page of records, and a page is bounded in
// bytes, not only in records. A done record holds its tool's result whole, and Scan read 256
// of them before handing the first on: `ledger export`, `verify`, `ls` and `stats` of a
// ledger of large results held 256 of them at once (the real binary's export of 8 records
// of 5 MB results peaked at 830 MB). Here 48 calls recorded through the engine on a real
// file, each a 1 MiB result: when the first record reaches the view, the heap holds less
// than 24 MiB more than before the view began (it held 48 MiB and more), and every record is
// read, in order, once.
func TestScanPageIsBoundedInBytes(t *testing.T) {
	const n, size = 48, 1 << 20
	path := filepath.Join(t.TempDir(), "ledger.db")
	st := openT(t, path, sqlite.Options{})
	eng := fence.New(st, fence.Config{})
	for i := range n {
		adm, err := eng.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("big:%03d", i), Tool: "read_file", Agent: "a", Args: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare %d: %+v %v", i, adm, err)
		}
		result := fmt.Sprintf(`{"content":[{"type":"text","text":"%d%s"}]}`, i, strings.Repeat("x", size))
		if _, err := eng.Commit(ctx, *adm.Ticket, []byte(result)); err != nil {
			t.Fatal(err)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	var held uint64
	seen := 0
	err := ledger.Walk(ctx, st, nil, ledger.Pass{Record: func(r *fence.Record) error {
		if want := fmt.Sprintf("big:%03d", seen); r.Intent != want || r.Cert == nil {
			return fmt.Errorf("record %d is %q (cert %v), want %q with its cert", seen, r.Intent, r.Cert != nil, want)
		}
		if seen == 0 {
			h := heap()
			held = h - min(before, h)
		}
		seen++
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if seen != n {
		t.Fatalf("the scan read %d records, want %d", seen, n)
	}
	if held > 24<<20 {
		t.Fatalf("with the first record of %d of %d KiB results, the view held %d MiB more heap than before it: the page is not bounded in bytes", n, size>>10, held>>20)
	}
	t.Logf("held %d MiB at the first record", held>>20)
}
