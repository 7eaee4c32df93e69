package diskfull

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Frozen mounts a small ext4 file system of the test's own (a loop device) and returns its
// directory and freeze, which freezes it (fsfreeze -f: every write waits, as under a backup
// tool's snapshot, or a network disk that hangs) until the thaw it returns is called. The
// test's cleanup thaws and unmounts it, whatever became of the test. It skips the test,
// saying why, where that cannot be made (not root, no mkfs.ext4 or fsfreeze, no loop device).
func Frozen(t testing.TB) (dir string, freeze func() (thaw func())) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: mounting and freezing a file system needs root")
	}
	for _, tool := range []string{"mkfs.ext4", "fsfreeze", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipped: %s is not installed", tool)
		}
	}
	base := t.TempDir()
	img, dir := filepath.Join(base, "disk.img"), filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(64 << 20)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Skipf("skipped: mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Skipf("skipped: a loop mount: %v: %s", err, out)
	}
	thaw := func() { _ = exec.Command("fsfreeze", "-u", dir).Run() }
	// Registered before anything that uses the mount: cleanups run last first, so this one
	// runs after the processes using it were stopped, and always thaws.
	t.Cleanup(func() {
		thaw()
		// A goroutine of the test's process may still hold a file there for a moment (a
		// write the freeze held, finishing after the thaw): umount is tried again for 10 s,
		// then detached (lazy), so no mount outlives the test (two did, busy at the first try).
		var out []byte
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if out, err = exec.Command("umount", dir).CombinedOutput(); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Logf("umount %s: %v: %s; detaching it (umount -l)", dir, err, out)
			if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
				t.Logf("umount -l %s: %v: %s", dir, err, out)
			}
		}
	})
	return dir, func() func() {
		if out, err := exec.Command("fsfreeze", "-f", dir).CombinedOutput(); err != nil {
			t.Fatalf("fsfreeze -f: %v: %s", err, out)
		}
		return thaw
	}
}
