package mcpstdio_test

import (
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// pipeFills waits up to d for the pipe on pid's standard input to hold 60 KiB or more (a
// writer is blocked on it) and says whether it saw that; false at once where /proc or the
// ioctl is not there to tell.
func pipeFills(pid int, d time.Duration) bool {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/fd/0", os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ) // FIONREAD
		if err != nil {
			return false
		}
		if n >= 60<<10 {
			return true
		}
	}
	return false
}
