//go:build linux

package history_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKilledHarnessLeavesNoMount runs the history command with -fulldisk and kills it with
// SIGKILL once its ledger's tmpfs is mounted: the tmpfs is in the command's own mount namespace,
// not the host's, so nothing of the run stays mounted. Before 2026-12-07 the harness mounted it
// in the host's namespace, where a SIGKILL, which unmounts nothing, left it.
func TestKilledHarnessLeavesNoMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: a full disk needs a tmpfs of the run's own (mount: root)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("skipped: a mount namespace of the harness's own needs the unshare command (util-linux)")
	}
	dir := t.TempDir()
	cmd := exec.Command(child, "-bin", bin, "-fulldisk", "-ledger", "sqlite", "-duration", "2m", "-seed", "5", "-dir", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // the wraps and their servers too
		_ = cmd.Wait()
		for _, m := range mountsUnder(t, "/proc/self/mountinfo", dir) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	var mounted []string
	for deadline := time.Now().Add(time.Minute); len(mounted) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the harness mounted no tmpfs under %s in a minute; its output:\n%s", dir, stderr.String())
		}
		mounted = mountsUnder(t, filepath.Join("/proc", strconv.Itoa(pid), "mountinfo"), dir)
	}
	if host := mountsUnder(t, "/proc/self/mountinfo", dir); len(host) > 0 {
		t.Fatalf("the harness's tmpfs %v is mounted in the host's namespace: a SIGKILL would leave it mounted", host)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if host := mountsUnder(t, "/proc/self/mountinfo", dir); len(host) > 0 {
		t.Fatalf("after the harness's SIGKILL, %v is still mounted", host)
	}
}

// mountsUnder lists the mount points under dir that a mountinfo file names.
func mountsUnder(t *testing.T, mountinfo, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	var under []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			under = append(under, f[4])
		}
	}
	return under
}
