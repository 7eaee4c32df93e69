//go:build unix

package fence

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// processGone reports whether no process has this pid (signal 0 probes without sending).
func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err != nil && errors.Is(err, syscall.ESRCH)
}

// lockDir takes an exclusive advisory lock on dir's lock file until unlock is called, waiting
// for it at most spoolLockWait. The lock only spares a second report of an outcome another
// process is reporting, and every drained report is a retry, which the ledger recognises and
// answers as the first, writing nothing (a commit's cert; a release, abort or lost found
// recorded). So a lock held longer, by a process stopped mid-drain (SIGSTOP, a frozen
// container) or waiting on a busy ledger, or a file system without flock, is no reason not to
// drain: the drain goes on without it. Before 2026-12-06 it waited for the lock for ever, and
// with it every Recover, open of the ledger and DrainedFor of the host
// (TestDrainDoesNotWaitForEverOnTheSpoolsLock).
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(spoolLockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return func() { f.Close() }, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK) && time.Now().Before(deadline):
			time.Sleep(10 * time.Millisecond)
			continue
		}
		f.Close() // held too long, or no flock here: drain without it
		return func() {}, nil
	}
}

// spoolLockWait is how long a drain waits for another process's drain of the spool.
const spoolLockWait = 2 * time.Second

// groupProbe reports whether no process has process group pgid, and whether it has members
// this process may not signal (another user's), which its /proc may not show either (hidepid).
// Signal 0 to the group probes without sending.
func groupProbe(pgid int) (empty, foreign bool) {
	err := syscall.Kill(-pgid, 0)
	return errors.Is(err, syscall.ESRCH), errors.Is(err, syscall.EPERM)
}
