//go:build unix

package fence

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// processGone reports whether no process has this pid (signal 0 probes without sending).
func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err != nil && errors.Is(err, syscall.ESRCH)
}

// lockDir takes an exclusive advisory lock on dir's lock file until unlock is called.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// groupProbe reports whether no process has process group pgid, and whether it has members
// this process may not signal (another user's), which its /proc may not show either (hidepid).
// Signal 0 to the group probes without sending.
func groupProbe(pgid int) (empty, foreign bool) {
	err := syscall.Kill(-pgid, 0)
	return errors.Is(err, syscall.ESRCH), errors.Is(err, syscall.EPERM)
}
