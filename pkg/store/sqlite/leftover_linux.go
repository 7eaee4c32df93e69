package sqlite

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// madeBeside notes, before an open that writes the ledger at path (absolute), whether a log is
// beside it, and returns takeBack, which the open calls if it fails: it removes the log the
// open made, and the index if the open made that too, when neither holds anything and no
// process has the ledger open. SQLite's every open of a ledger in WAL mode makes them when
// they are not there; on a full disk it fails to grow the index, and the open fails, leaving
// an empty log and an index cut to 3 bytes behind, which the next process takes as its own
// (and check must read past). A log that was there before the open is never touched, nor its
// index: it may hold a killed holder's last decisions, and its index what walLost tells a lost
// log by. Nothing is removed unless, with SQLite's exclusive lock on the file taken as its
// last connection's close takes it to remove them, the log is empty and its index counts no
// frame of it.
func madeBeside(path string) (takeBack func()) {
	real := realPath(path)
	wal, shm := real+"-wal", real+"-shm"
	if present(wal) {
		return func() {}
	}
	hadIndex := present(shm)
	// emptyLog reports whether an empty log is beside the ledger, and no index or a regular
	// file as its index (a named pipe there is refused by the open, and would hang a look).
	emptyLog := func() bool {
		lw, err := os.Lstat(wal)
		if err != nil || !lw.Mode().IsRegular() || lw.Size() != 0 {
			return false
		}
		li, err := os.Lstat(shm)
		return errors.Is(err, os.ErrNotExist) || err == nil && li.Mode().IsRegular()
	}
	return func() {
		fi, err := os.Stat(path)
		if err != nil || !emptyLog() {
			return
		}
		_, _ = aside(fi, func() error {
			f, err := os.OpenFile(path, os.O_RDWR, 0) // a write lock needs a descriptor that writes
			if err != nil {
				return nil
			}
			defer f.Close() // its lock with it
			if !lockWhole(f, real) || !emptyLog() {
				return nil
			}
			if problem, err := walLostOnce(real); err != nil || problem != "" {
				return nil
			}
			if err := os.Remove(wal); err == nil && !hadIndex {
				_ = os.Remove(shm)
			}
			return nil
		})
	}
}

// lockWhole takes, on the ledger file f, SQLite's exclusive lock (its pending byte, reserved
// byte and shared range written), as an open file description lock that f's close gives
// back, and reports whether it did and no process has the index beside real open either:
// then no process has the ledger open, and none opens it until f is closed.
func lockWhole(f *os.File, real string) bool {
	excl := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: pendingByte, Len: 2 + sharedSize}
	if unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &excl) != nil {
		return false
	}
	return indexUnheld(real)
}
