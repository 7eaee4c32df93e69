package durabledir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
)

// TestMkdirAllSyncsTheParentOfEveryDirectoryItMakes: each new directory's entry is in its
// parent, so the parent is synced once the directory is made; os.MkdirAll syncs none, and a
// ledger made in a new directory could vanish with it in a power cut. Directories that were
// there are left alone.
func TestMkdirAllSyncsTheParentOfEveryDirectoryItMakes(t *testing.T) {
	var mu sync.Mutex
	var synced []string
	real := syncDir
	syncDir = func(dir string) error {
		mu.Lock()
		synced = append(synced, dir)
		mu.Unlock()
		return real(dir)
	}
	t.Cleanup(func() { syncDir = real })

	root := t.TempDir()
	path := filepath.Join(root, "a", "b", "c")
	if err := MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v", path, fi, err)
	}
	want := []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")}
	if !slices.Equal(synced, want) {
		t.Fatalf("synced %q, want the parents of the three new directories %q", synced, want)
	}
	synced = nil
	if err := MkdirAll(path, 0o700); err != nil || len(synced) != 0 {
		t.Fatalf("again: %v, synced %q; want nothing done", err, synced)
	}
	if err := MkdirAll(filepath.Join(path, "d"), 0o700); err != nil || !slices.Equal(synced, []string{path}) {
		t.Fatalf("one more level: %v, synced %q; want %s alone", err, synced, path)
	}
}

// TestMkdirAllRefusesAFileInTheWay: a file where a directory should be is an error, as with
// os.MkdirAll, and nothing is made under it.
func TestMkdirAllRefusesAFileInTheWay(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, filepath.Join(file, "sub")} {
		if err := MkdirAll(p, 0o700); err == nil {
			t.Fatalf("MkdirAll(%s) with a file in the way: no error", p)
		} else if p == file && !errors.Is(err, syscall.ENOTDIR) {
			t.Fatalf("MkdirAll(%s): %v, want ENOTDIR", p, err)
		}
	}
}

// TestMkdirAllConcurrent: processes (here goroutines) that make the same directories at once
// all succeed.
func TestMkdirAllConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x", "y", "z")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = MkdirAll(path, 0o700)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("maker %d: %v", i, err)
		}
	}
}
