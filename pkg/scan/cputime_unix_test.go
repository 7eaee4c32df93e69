//go:build unix

package scan

import (
	"syscall"
	"time"
)

// processCPU is the user+system CPU time this process has used, so a benchmark on a shared
// machine can report the work it did as well as the wall time it waited.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
