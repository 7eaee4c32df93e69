package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Magic numbers of statfs(2)'s f_type for the filesystems whose files do not outlive what
// holds them.
const (
	overlayMagic = 0x794c7630
	tmpfsMagic   = 0x01021994
	ramfsMagic   = 0x858458f6
)

// Volatile says why a ledger at path would not keep its receipts as long as its user expects,
// or "" when its filesystem is one that keeps them (or cannot be read): an overlay filesystem
// is, almost always, a container's writable layer, removed with the container (a `docker run
// --rm` per session starts every session with an empty ledger, so a retry after a restart runs
// again); tmpfs and ramfs are memory, emptied by a reboot. It is a warning, not a refusal:
// such a ledger still fences everything while it lasts.
func Volatile(path string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(realPath(path)), &st); err != nil {
		return ""
	}
	switch uint32(st.Type) {
	case overlayMagic:
		return "is on an overlay filesystem (a container's own writable layer?): it goes when the container is removed, and every receipt with it, so a call retried after that runs again; keep the ledger on a volume or a mounted directory, or use --ledger postgres://..."
	case tmpfsMagic, ramfsMagic:
		return "is in memory (tmpfs): it is emptied at the next reboot, and every receipt with it, so a call retried after that runs again; keep the ledger on a disk (the default, under $XDG_STATE_HOME or ~/.local/state)"
	}
	return ""
}

// diskTrouble names what the file system under the ledger at path shows that fails writes
// there, "" when nothing (or it cannot be told). SQLite says "disk I/O error" whatever the
// kernel said, and statfs(2) does not show a file system that ext4 turned read-only after
// an error on its disk (errors=remount-ro; /proc/mounts still says rw, emergency_ro), so it
// asks the file system: a file made beside the ledger, one byte written, then removed (only
// after a write failed). full says SQLite reported the disk full.
func diskTrouble(path string, full bool) string {
	// A file made immutable or append-only (chattr +i, +a) under the process: its writes fail
	// with EPERM, even root's, through descriptors opened before. statx reads the attributes
	// without opening the file (closing a descriptor of it would drop this process's locks).
	for _, f := range []string{realPath(path), realPath(path) + "-wal"} {
		var st unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, f, 0, unix.STATX_BASIC_STATS, &st) != nil {
			continue
		}
		if st.Attributes&(unix.STATX_ATTR_IMMUTABLE|unix.STATX_ATTR_APPEND) != 0 {
			return fmt.Sprintf("%s is immutable or append-only (`lsattr` shows the i or a attribute; `chattr -i -a %s` clears them), so nothing can be recorded", f, f)
		}
	}
	f, err := os.CreateTemp(filepath.Dir(realPath(path)), ".effectfence-probe-*")
	if err == nil {
		_, err = f.Write([]byte{0})
		f.Close()
		os.Remove(f.Name())
	}
	switch {
	case errors.Is(err, syscall.EROFS):
		return "its file system is read-only (EROFS: mounted read-only, or remounted so after an error on its disk, as ext4's errors=remount-ro does; the kernel's log says, `dmesg`): nothing can be recorded until the disk is repaired and mounted read-write again"
	case errors.Is(err, syscall.EDQUOT):
		return "this user's disk quota is used up (EDQUOT)"
	case errors.Is(err, syscall.ENOSPC) || full:
		return "its file system has no room left (ENOSPC)"
	}
	return ""
}
