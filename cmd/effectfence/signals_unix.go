//go:build unix

package main

import (
	"os"
	"syscall"
)

// statsSignals ask a running wrap to log its counters (kill -USR1 PID).
var statsSignals = []os.Signal{syscall.SIGUSR1}
