package probe

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// At the timeout every process the witness started is killed, not only its shell.
func TestWitnessTimeoutKillsWhatItStarted(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err := CommandWitness{Command: "sleep 30 & echo $! > " + pidFile + "; wait", Timeout: 300 * time.Millisecond}.Measure(context.Background())
	if err == nil || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("err = %v", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Gone, or a zombie its new parent has yet to reap: no longer running.
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the witness's sleep (pid %d) still runs after its timeout", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
