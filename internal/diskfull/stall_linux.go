package diskfull

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// StallSyncs makes every fsync and fdatasync of process pid return only after delay, the
// data already written: strace's fault injection (delay_exit) holds each one after the kernel
// did it, so a SQLite commit has reached the ledger's file and waits for its answer, as on a
// disk that stops answering between a write and its acknowledgement (a frozen file system
// thawing, a hung network disk coming back). The returned release ends the stall (strace
// detaches, letting a held call return at once). Skipped where strace cannot attach.
func StallSyncs(t testing.TB, pid int, delay time.Duration) (release func()) {
	t.Helper()
	return injectSyncs(t, pid, fmt.Sprintf("delay_exit=%d", delay.Microseconds()))
}

// FailSyncs makes every fsync and fdatasync of process pid fail with EIO without doing it
// (strace's fault injection, error=EIO), until the returned stop is called: the data written
// before it stays in the page cache, and may reach the disk later or not, as after a disk's
// write error, when nothing says which of the written pages were kept. Skipped where strace
// cannot attach.
func FailSyncs(t testing.TB, pid int) (stop func()) {
	t.Helper()
	return injectSyncs(t, pid, "error=EIO")
}

// injectSyncs attaches strace to pid, injecting how into its every fsync and fdatasync.
func injectSyncs(t testing.TB, pid int, how string) (release func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: attaching strace to another process needs root (or ptrace rights)")
	}
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("skipped: strace is not installed")
	}
	cmd := exec.Command("strace", "-f", "-qq", "-o", "/dev/null", "-p", fmt.Sprint(pid),
		"-e", "trace=fsync,fdatasync",
		"-e", "inject=fsync,fdatasync:"+how)
	var stderr bytes.Buffer // read once strace has exited
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Skipf("skipped: strace: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	release = func() {
		select {
		case <-done:
			return
		default:
		}
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(release)
	// Attached once the process's every thread has a tracer.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if traced(pid) {
			break
		}
		select {
		case <-done:
			t.Skipf("skipped: strace could not attach: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("strace did not attach to %d in 10 s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return release
}

// traced reports whether every thread of pid has a tracer.
func traced(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil || strings.Contains(string(b), "TracerPid:\t0\n") {
			return false
		}
	}
	return true
}
