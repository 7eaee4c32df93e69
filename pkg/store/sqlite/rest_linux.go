package sqlite

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// SQLite's locks on a database file (os_unix.c): the pending byte at 1 GiB, the reserved byte
// after it, and the 510 bytes of the shared lock every connection holds while it is open.
const (
	pendingByte = 0x40000000
	sharedFirst = pendingByte + 2
	sharedSize  = 510
)

// restingReader returns a descriptor of the ledger file at path that holds SQLite's shared
// lock, as a reader does, if the ledger is at rest: no write-ahead log or index beside it and
// no process holding any of SQLite's locks on the file. Nil when it is not, or when this
// cannot be told.
//
// The lock is an open file description lock: it stays while this process's other descriptors
// of the file (SQLite's, of an immutable read) open and close, which drop its POSIX locks.
// While it is held, no connection that opens the ledger can close as the last one, which
// takes an exclusive lock to delete the log and the index: whoever opens the ledger
// meanwhile leaves them behind, for stillAtRest to see.
func restingReader(path string) *os.File {
	if logBeside(path) {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	shared := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: sharedFirst, Len: sharedSize}
	if unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &shared) != nil || !stillAtRest(f, path) {
		f.Close()
		return nil
	}
	return f
}

// stillAtRest reports whether the ledger file f (at path), whose shared lock f holds, is still
// at rest: no log or index beside it, and no lock of another process (or of a connection of
// this one) on any of SQLite's bytes but shared ones like f's.
func stillAtRest(f *os.File, path string) bool {
	if logBeside(path) {
		return false
	}
	for _, probe := range []unix.Flock_t{
		{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: pendingByte, Len: 2},
		{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: sharedFirst, Len: sharedSize},
	} {
		if unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &probe) != nil || probe.Type != unix.F_UNLCK {
			return false
		}
	}
	return true
}

// logBeside reports whether a write-ahead log or an index is beside the ledger at path, or
// beside the file a symbolic link at path leads to, where SQLite keeps them.
func logBeside(path string) bool {
	for _, base := range []string{path, realPath(path)} {
		if present(base+"-wal") || present(base+"-shm") {
			return true
		}
	}
	return false
}

// present reports whether a file is at path; one that cannot be looked at counts as there.
func present(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// SQLite's locks in a ledger's index (-shm): its eight locks from byte 120, and the lock every
// connection that has the index open holds on the byte after them (os_unix.c, UNIX_SHM_DMS).
const (
	shmLockFirst = 120
	shmLockSize  = 9
)

// lockAlone takes, on the ledger file f (at path), the shared lock of a reader, as an open
// file description lock, and reports whether no process has the ledger open: no lock of
// another on any of SQLite's bytes of the file but shared ones, and none on its index's. A
// log and an index beside it (a process killed while it used the ledger leaves them) are read
// with it, not judged here (indexUnheld looks at the index's locks).
func lockAlone(f *os.File, path string) bool {
	shared := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: sharedFirst, Len: sharedSize}
	if unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &shared) != nil {
		return false
	}
	for _, probe := range []unix.Flock_t{
		{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: pendingByte, Len: 2},
		{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: sharedFirst, Len: sharedSize},
	} {
		if unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &probe) != nil || probe.Type != unix.F_UNLCK {
			return false
		}
	}
	return indexUnheld(realPath(path))
}

// indexUnheld reports whether no process holds a lock on the index beside the ledger at real
// (true when there is none): every connection that has the index open holds one. The index is
// opened without blocking or following a link, so that a named pipe put there (after the
// checks for special files beside the ledger) cannot hang the look; a descriptor of it closed
// drops no lock this process holds there, as it holds none (see here.go).
func indexUnheld(real string) bool {
	shm, err := os.OpenFile(real+"-shm", os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	defer shm.Close()
	probe := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: shmLockFirst, Len: shmLockSize}
	return unix.FcntlFlock(shm.Fd(), unix.F_OFD_GETLK, &probe) == nil && probe.Type == unix.F_UNLCK
}
