//go:build unix

package fence

import (
	"errors"
	"syscall"
)

// processGone reports whether no process has this pid (signal 0 probes without sending).
func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err != nil && errors.Is(err, syscall.ESRCH)
}
