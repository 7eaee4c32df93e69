package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStopSignalStopsTheServersChildren: SIGTERM (or Ctrl-C's SIGINT) to a probe, a scan
// --run or a policy init that is waiting for its server stops the server's whole process group, including
// what the server command started. The child is in its own process group, so the signal
// never reaches it; before, the command died of the signal and a shell's (or npx's) child
// went on running under init, with any calls sent to it.
func TestStopSignalStopsTheServersChildren(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"probe", []string{"probe", "--tool", "x", "--"}},
		{"scan --run", []string{"scan", t.TempDir(), "--run", "--"}},
		// policy init caught no signal before 2026-12-07: it died of SIGTERM (exit -1 here)
		// and the sleep went on running.
		{"policy init", []string{"policy", "init", "--"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
			// a server command that starts a grandchild which never reads stdin and never answers
			server := []string{"sh", "-c", `sleep 1000 & echo $! > "$0"; wait`, pidFile}
			cmd := exec.Command(bin, append(tc.args, server...)...)
			cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := 0
			for pid == 0 {
				b, _ := os.ReadFile(pidFile)
				if s := strings.TrimSpace(string(b)); strings.HasSuffix(string(b), "\n") {
					if pid, _ = strconv.Atoi(s); pid == 0 {
						t.Fatalf("pid file holds %q", b)
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) || !strings.Contains(errb.String(), "stopped by terminated") {
				t.Errorf("effectfence %s: %v, stderr %q; want exit %d and a message", tc.name, err, errb.String(), 128+int(syscall.SIGTERM))
			}
			// SIGKILL takes effect at once but the grandchild may take a moment to be reaped
			for i := 0; alive(pid); i++ {
				if i == 2000 {
					t.Fatalf("the server's child %d still runs after effectfence %s exited", pid, tc.name)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// alive reports whether pid is a process that has not ended (a zombie has ended).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
