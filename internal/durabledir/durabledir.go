// Package durabledir creates directories whose entries survive a power loss.
//
// os.MkdirAll makes each missing directory, but the entry naming a new directory lives in its
// parent, and it reaches the disk only when the parent is synced. A ledger or spool file
// synced into a new directory (~/.local/state/effectfence on first use) could vanish with
// that directory after a power cut: every decision in it forgotten, and a call that ran
// before the cut ran again after it. MkdirAll here syncs the parent of every directory it
// makes.
package durabledir

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
)

// MkdirAll is os.MkdirAll (perm before the umask), with the parent of each directory it
// creates synced before it returns.
func MkdirAll(path string, perm os.FileMode) error {
	path = filepath.Clean(path)
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return &os.PathError{Op: "mkdir", Path: path, Err: syscall.ENOTDIR}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	parent := filepath.Dir(path)
	if parent != path {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(path, perm); err != nil {
		// Another process made it meanwhile: its entry is synced below all the same.
		if fi, serr := os.Stat(path); serr != nil || !fi.IsDir() {
			return err
		}
	}
	return syncDir(parent)
}

// syncDir syncs the directory dir, so that the entries made in it are on disk (a variable
// for the tests). Windows syncs no directory handle (NTFS journals its entries).
var syncDir = func(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		// EINVAL: a file system that does not sync directories (some network and FUSE
		// ones); nothing more can be done there.
		return &os.PathError{Op: "sync", Path: dir, Err: err}
	}
	return nil
}
