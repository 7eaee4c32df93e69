//go:build unix

package mcptest

import (
	"os"
	"os/signal"
	"syscall"
)

// stopSelf stops this process (SIGSTOP) and returns once something continues it (SIGCONT).
// The stop of a process's every thread is not immediate: the goroutine that sent it could
// run on, and answer, before its own thread stopped, so it waits for the SIGCONT.
func stopSelf() {
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	<-cont
}
