package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// locksOn counts this process's POSIX locks on the file at path (/proc/locks).
func locksOn(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ino := strconv.FormatUint(fi.Sys().(*syscall.Stat_t).Ino, 10)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	pid, n := strconv.Itoa(os.Getpid()), 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// "1: POSIX  ADVISORY  READ 1234 08:01:5678 1073741824 1073742335"
		if len(f) >= 6 && f[1] == "POSIX" && f[4] == pid && strings.HasSuffix(f[5], ":"+ino) {
			n++
		}
	}
	return n
}

// TestTwoStoresInOneProcessKeepTheFileLocks: closing any descriptor of a file drops every
// POSIX lock the process holds on it, SQLite's included (SQLite's own connections share their
// descriptors to avoid it). Opening a second Store on a ledger this process already has open,
// or checking it, read the file's header and tried it for writing with descriptors of their
// own, and closed them: the first Store's lock on the file was gone (1 lock, then 0). SQLite
// relies on that lock between processes ("How To Corrupt An SQLite Database File", 2.2). A
// read-only Store opened and closed beside them must not drop it either.
func TestTwoStoresInOneProcessKeepTheFileLocks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	a, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	e := fence.New(a, fence.Config{})
	if adm, err := e.Prepare(ctx, fence.Request{Intent: "locks:1", Tool: "t"}); err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	held := locksOn(t, path)
	if held == 0 {
		t.Fatal("an open Store holds no lock on its file: this test cannot tell anything")
	}
	b, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := locksOn(t, path); n < held {
		t.Fatalf("opening a second Store on the ledger left this process %d locks on it, %d before", n, held)
	}
	if _, err := sqlite.Check(ctx, path); err != nil {
		t.Fatal(err)
	}
	if n := locksOn(t, path); n < held {
		t.Fatalf("checking the ledger left this process %d locks on it, %d before", n, held)
	}
	r, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	b.Close()
	if n := locksOn(t, path); n < held {
		t.Fatalf("closing the other Stores left this process %d locks on it, %d before", n, held)
	}
	if adm, err := e.Prepare(ctx, fence.Request{Intent: "locks:2", Tool: "t"}); err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
}

// TestUnwritableBesideKeepsTheLocks: an error SQLite reports as read-only (SQLITE_READONLY) on
// an open Store looks at the files beside its ledger to name one it may not write. That look
// opened and closed the ledger file and its index, which dropped every POSIX lock this process
// held on them, SQLite's included, while the Store went on (here.go): another process could
// then take the ledger for unused (its last connection, which checkpoints and removes the
// log) or the index for abandoned. The look must leave every lock in place.
func TestUnwritableBesideKeepsTheLocks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := fence.New(st, fence.Config{})
	if adm, err := e.Prepare(ctx, fence.Request{Intent: "beside:1", Tool: "t"}); err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	file, index := locksOn(t, path), locksOn(t, path+"-shm")
	if file+index == 0 {
		t.Fatal("an open Store holds no lock on its file or its index: this test cannot tell anything")
	}
	if side := sqlite.UnwritableBeside(path); side != "" {
		t.Fatalf("the look names %s, which this process may write", side)
	}
	if f, i := locksOn(t, path), locksOn(t, path+"-shm"); f < file || i < index {
		t.Fatalf("after the look this process holds %d lock(s) on the ledger and %d on its index; %d and %d before", f, i, file, index)
	}
	if adm, err := e.Prepare(ctx, fence.Request{Intent: "beside:2", Tool: "t"}); err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
}
