// Package diskfull gives tests a real full disk: a small tmpfs of their own, and a file that
// fills it.
package diskfull

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes for the test and returns its directory, unmounted when
// the test ends. It skips the test, saying why, where mounting is not allowed (not root).
func Mount(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Skipf("a full disk needs a small file system of its own: mounting a tmpfs at %s: %v (run the tests as root)", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file in dir until its file system has no room left, and returns the file's
// path: removing it makes the room again. Called again (a test that made some room), it
// writes another file, filler-2, filler-3 and so on, and leaves the ones before as they are.
func Fill(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	for n := 2; errors.Is(err, os.ErrExist); n++ {
		path = filepath.Join(dir, "filler-"+strconv.Itoa(n))
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		n, err := f.Write(chunk)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n < len(chunk) {
			break
		}
	}
	// The last pages of room, smaller than a chunk.
	for {
		if _, err := f.Write(chunk[:512]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return path
			}
			t.Fatal(err)
		}
	}
}
