package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"golang.org/x/sys/unix"
)

// TestIndexScanSeesADescriptorReusedBetweenItsLooks: the index watch finds SQLite's
// descriptor of the index by its name in /proc/self/fd, then looks at the file through it.
// Connections open and close meanwhile (SQLite closes the index's descriptor whenever the
// process's last connection to the ledger closes), so the number can name another file by the
// second look; the watch would take that file for the index, find the name leading elsewhere,
// and stop the writer for good. Here the descriptor is made
// to name another file between the two looks (dup2): the watch must see it as not the index.
func TestIndexScanSeesADescriptorReusedBetweenItsLooks(t *testing.T) {
	ctx := context.Background()
	st, other := indexAndAnotherFile(t, "other")
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

// TestIndexWatchSeesItsDescriptorReusedWithTheIndexInode: once found, the index's descriptor
// is checked with one fstat. SQLite closes it when the process's last connection closes (and
// deletes the index if no other process has the ledger open); the next connection makes a new
// index, and the old number and the old inode number may then both belong to another file,
// such as the new -wal. The fstat matched, the file had no name "-shm", and the watch stopped
// the writer for good with the index in its place (TestGoexitsUnderLoad, in CI and here under
// load). Here the watch holds a descriptor of another file with that file's inode as the one
// it recorded: it must find the index again by its name, and not call it removed.
func TestIndexWatchSeesItsDescriptorReusedWithTheIndexInode(t *testing.T) {
	st, other := indexAndAnotherFile(t, "ledger.db-wal-like")
	fi, err := other.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// The watch recorded the index's birth time; the inode number is now another file's.
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, st.real+"-shm", 0, unix.STATX_BTIME, &sx); err != nil {
		t.Fatal(err)
	}
	w := indexWatch{fd: int(other.Fd()), fi: fi, born: sx.Btime}
	if w.removed(st.real) {
		t.Fatal("a reused descriptor whose file has the inode the watch recorded was taken for a removed index")
	}
	if w.fd == int(other.Fd()) {
		t.Fatal("the watch kept the reused descriptor as the index's")
	}
	if target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(w.fd)); err != nil || target != st.real+"-shm" {
		t.Fatalf("the watch found descriptor %d (%q, %v), not the index's", w.fd, target, err)
	}
	// The index really removed is still seen, through the same descriptor.
	if err := os.Remove(st.real + "-shm"); err != nil {
		t.Fatal(err)
	}
	if !w.removed(st.real) {
		t.Fatal("the removed index was not seen")
	}
}

// TestIndexWatchSeesTheIndexMovedAway: the index is renamed away while this process maps it,
// and another process makes a new one at its name. The descriptor's file keeps a name, not
// the index's, and the inode number is the one recorded: only its birth time tells it is
// still the index this process found, moved, not another file given the number.
func TestIndexWatchSeesTheIndexMovedAway(t *testing.T) {
	st, _ := indexAndAnotherFile(t, "unused")
	w := indexWatch{fd: -1}
	if w.removed(st.real) {
		t.Fatal("an index in its place was taken for a removed one")
	}
	if w.fd < 0 {
		t.Fatal("the watch did not find the index's descriptor")
	}
	if w.born.Sec == 0 {
		t.Skip("this file system keeps no birth times: an index moved away is not seen (docs/ledger.md)")
	}
	if err := os.Rename(st.real+"-shm", filepath.Join(filepath.Dir(st.real), "moved-shm")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(st.real+"-shm", make([]byte, 32<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	if !w.removed(st.real) {
		t.Fatal("an index moved away, with another at its name, was not seen")
	}
}

// indexAndAnotherFile opens a ledger and writes once, so this process maps its index, and
// opens another file, name, beside it.
func indexAndAnotherFile(t *testing.T, name string) (*Store, *os.File) {
	t.Helper()
	dir := t.TempDir()
	st, err := Open(context.Background(), filepath.Join(dir, "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Update(context.Background(), func(tx fence.Tx) error { return tx.SetDomainSeq("d", 1) }); err != nil {
		t.Fatal(err)
	}
	other, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return st, other
}
