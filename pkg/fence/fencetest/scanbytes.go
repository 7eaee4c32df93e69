package fencetest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// CheckScanPageIsBoundedInBytes checks that a Scan of st holds a page of records bounded in
// bytes, not only in records. A done record holds its tool's result whole, and a page of 256
// of them was held before the first was handed on: `ledger export`, `verify`, `ls` and `stats`
// of a ledger of large results held 256 of them at once (the real binary's export of 8
// records of 5 MB results peaked at 830 MB). Here 48 calls recorded through the engine, each a
// 1 MiB result: when the first record reaches the Scan's function, the heap holds less than
// 24 MiB more than before the Scan began (it held 48 MiB and more), and every record is read,
// in order, once. st must be empty.
func CheckScanPageIsBoundedInBytes(t *testing.T, st fence.Store) {
	t.Helper()
	ctx := context.Background()
	const n, size = 48, 1 << 20
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
	var held uint64
	seen := 0
	err := st.View(ctx, func(tx fence.Tx) error {
		before := heap()
		seen = 0
		var bad error
		err := tx.Scan(fence.Filter{}, func(r *fence.Record) bool {
			if want := fmt.Sprintf("big:%03d", seen); r.Intent != want || r.Cert == nil {
				bad = fmt.Errorf("record %d is %q (cert %v), want %q with its cert", seen, r.Intent, r.Cert != nil, want)
				return false
			}
			if seen == 0 {
				h := heap()
				held = h - min(before, h)
			}
			seen++
			return true
		})
		if bad != nil {
			return bad
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != n {
		t.Fatalf("the scan read %d records, want %d", seen, n)
	}
	if held > 24<<20 {
		t.Fatalf("with the first record of %d of %d KiB results, the scan held %d MiB more heap than before it: the page is not bounded in bytes", n, size>>10, held>>20)
	}
	t.Logf("held %d MiB at the first record", held>>20)
}
