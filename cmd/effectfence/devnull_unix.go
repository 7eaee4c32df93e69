//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// readWriteDevNull reports whether f is /dev/null open for reading and writing. That is what
// Go's runtime opens in place of a standard descriptor that was closed when the process
// started (`effectfence ledger export >&-`), so that a write to it is not an error. A shell's
// `> /dev/null` opens it for writing only; but a launcher that discards a child's output may
// open it for both too (Python's subprocess.DEVNULL, libuv's "ignore"), so this cannot tell a
// closed stdout from one of those.
func readWriteDevNull(f *os.File) bool {
	var st, null unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || unix.Stat(os.DevNull, &null) != nil {
		return false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != null.Rdev {
		return false
	}
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	return err == nil && fl&unix.O_ACCMODE == unix.O_RDWR
}
