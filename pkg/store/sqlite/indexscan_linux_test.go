package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestIndexScanSeesADescriptorReusedBetweenItsLooks: the index watch finds SQLite's
// descriptor of the index by its name in /proc/self/fd, then looks at the file through it.
// Connections open and close meanwhile (SQLite closes the index's descriptor whenever the
// process's last connection to the ledger closes), so the number can name another file by the
// second look; the watch took that file for the index, found the name leading elsewhere, and
// stopped the writer for good (TestGoexitsUnderLoad, once in CI). Here the descriptor is made
// to name another file between the two looks (dup2): the watch must see it as not the index.
func TestIndexScanSeesADescriptorReusedBetweenItsLooks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := Open(ctx, filepath.Join(dir, "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Update(ctx, func(tx fence.Tx) error { return tx.SetDomainSeq("d", 1) }); err != nil {
		t.Fatal(err)
	}
	other, err := os.Create(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var saved = -1
	var shm int
	testHookIndexScan = func(fd string) {
		n, err := strconv.Atoi(fd)
		if err != nil || saved >= 0 {
			return
		}
		// The index's descriptor now names another file; it gets the index back below.
		if saved, err = syscall.Dup(n); err != nil {
			t.Fatal(err)
		}
		shm = n
		if err := syscall.Dup2(int(other.Fd()), n); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { testHookIndexScan = nil }()
	w := indexWatch{fd: -1}
	removed := w.removed(st.real)
	if saved < 0 {
		t.Fatal("the scan never looked at the index's descriptor")
	}
	if err := syscall.Dup2(saved, shm); err != nil {
		t.Fatal(err)
	}
	syscall.Close(saved)
	if removed {
		t.Fatal("a descriptor of the index that named another file by the second look was taken for a removed index")
	}
	if err := st.Update(ctx, func(tx fence.Tx) error { return tx.SetDomainSeq("d", 2) }); err != nil {
		t.Fatalf("a write after the scan: %v", err)
	}
}
