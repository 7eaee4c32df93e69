//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestStopWaitsForTheSecondSignalsExit: the second stop signal's handler kills what the
// command waits for, so the command can end and return 0 while the handler is still on its way
// to exiting with 130. The process must exit 130: stop, which the command defers, waits for
// that exit. The scenario runs in a child process (this test binary again), since it exits.
func TestStopWaitsForTheSecondSignalsExit(t *testing.T) {
	if os.Getenv("EFFECTFENCE_TEST_STOP_CHILD") == "1" {
		stopChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStopWaitsForTheSecondSignalsExit$")
	cmd.Env = append(os.Environ(), "EFFECTFENCE_TEST_STOP_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) {
		t.Fatalf("exit: %v, want code %d\n%s", err, 128+int(syscall.SIGINT), out)
	}
}

// stopChild is the command: it waits until the second signal's handler lets it end (as a
// killed MCP server ends wrap's drain), then returns through stop and exits 0.
func stopChild() {
	finished := make(chan struct{})
	_, stop := stopOnSignals(context.Background(), func(os.Signal) {}, func(os.Signal) {
		close(finished)
		time.Sleep(300 * time.Millisecond) // the handler is slow to reach its exit
	})
	go func() {
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		time.Sleep(100 * time.Millisecond)
		syscall.Kill(os.Getpid(), syscall.SIGINT)
	}()
	<-finished
	stop()
	os.Exit(0)
}
