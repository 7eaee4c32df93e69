//go:build unix

package mcptest

import (
	"os"
	"syscall"
)

// stopSelf stops this process (SIGSTOP) until something continues it (SIGCONT).
func stopSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
