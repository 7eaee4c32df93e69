//go:build unix

package probe

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestWitnessReadsAShellThatLeftAChildBehind: a witness whose shell exits 0 after printing its
// number, leaving a background process that holds its output open, is read, not failed. It
// used to fail with "WaitDelay expired before I/O complete", which stopped the probe before
// any call although the witness had printed 7.
func TestWitnessReadsAShellThatLeftAChildBehind(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	n, err := CommandWitness{Command: "sleep 30 & echo $! > " + pidFile + "; echo 7"}.Measure(context.Background())
	if err != nil || n != 7 {
		t.Fatalf("Measure = %d, %v; want 7, nil", n, err)
	}
}
