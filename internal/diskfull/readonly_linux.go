package diskfull

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Ext4 is a small ext4 file system of a test's own on a loop device, mounted with
// errors=remount-ro, as distributions mount their root file systems.
type Ext4 struct {
	t        testing.TB
	img, Dir string
	repairs  int // copies made by Repair
}

// MountExt4 makes and mounts an Ext4 for the test, unmounted (and its loop device freed) when
// the test ends, once the processes using it have ended. It skips the test, saying why, where
// that cannot be made (not root, no mkfs.ext4, e2fsck or loop device).
func MountExt4(t testing.TB) *Ext4 {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: mounting a file system of the test's own needs root")
	}
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipped: %s is not installed", tool)
		}
	}
	base := t.TempDir()
	d := &Ext4{t: t, img: filepath.Join(base, "disk.img"), Dir: filepath.Join(base, "mnt")}
	if err := os.Mkdir(d.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(d.img)
	if err == nil {
		err = f.Truncate(64 << 20)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", d.img).CombinedOutput(); err != nil {
		t.Skipf("skipped: mkfs.ext4: %v: %s", err, out)
	}
	if err := d.mount(); err != nil {
		t.Skipf("skipped: a loop mount: %v", err)
	}
	// Registered before anything that uses the mount: cleanups run last first, so this one
	// runs after the processes using it were stopped.
	t.Cleanup(func() {
		if mounted(d.Dir) {
			if err := d.unmount(); err != nil {
				t.Logf("%v; detaching it (umount -l)", err)
				_ = exec.Command("umount", "-l", d.Dir).Run()
			}
		}
	})
	return d
}

func (d *Ext4) mount() error {
	if out, err := exec.Command("mount", "-o", "loop,errors=remount-ro", d.img, d.Dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount %s: %v: %s", d.Dir, err, out)
	}
	return nil
}

// unmount unmounts d, trying again for 10 s while it is busy (a process ending).
func (d *Ext4) unmount() error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var out []byte
		if out, err = exec.Command("umount", d.Dir).CombinedOutput(); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("umount %s: %v: %s", d.Dir, err, strings.TrimSpace(string(out)))
		}
	}
}

// Fail makes the file system fail as ext4 does when it finds an error on its disk
// (trigger_fs_error): its journal aborted, it is remounted read-only at once, every write
// and every fsync since, of files open for writing too, failing with EROFS. It stays so until
// it is unmounted (a remount read-write is refused).
func (d *Ext4) Fail() {
	d.t.Helper()
	dev, err := exec.Command("findmnt", "-n", "-o", "SOURCE", d.Dir).Output()
	if err != nil {
		d.t.Fatalf("findmnt %s: %v", d.Dir, err)
	}
	knob := filepath.Join("/sys/fs/ext4", filepath.Base(strings.TrimSpace(string(dev))), "trigger_fs_error")
	if err := os.WriteFile(knob, []byte("effectfence test\n"), 0); err != nil {
		d.t.Skipf("skipped: ext4's error knob: %v", err)
	}
}

// Repair unmounts the failed file system, checks it (e2fsck -fy) and mounts it again,
// writable: what a person does once the disk is back. Every process using it must have ended.
//
// What is mounted again is a copy of the checked image, on a loop device of its own. A mount
// namespace made while the file system was mounted (a parallel test's unshare --mount, whose
// copy of the mounts is private) keeps the failed one mounted there, and with it its loop
// device and its superblock: mount -o loop of the same image then reused that device, and the
// kernel handed back the live superblock, still read-only (findmnt showed emergency_ro, and the
// kernel logged no unmount and no new mount). Seen in two full CI runs, never alone; then
// reproduced by hand: with `unshare --mount --propagation private sleep 60` started while the
// image was mounted, the same image mounted again was loop0, emergency_ro, read-only; its copy
// mounted writable on loop1.
func (d *Ext4) Repair() {
	d.t.Helper()
	if mounted(d.Dir) {
		if err := d.unmount(); err != nil {
			d.t.Fatal(err)
		}
	}
	// e2fsck exits 1 when it corrected the file system: not an error here.
	if out, err := exec.Command("e2fsck", "-fy", d.img).CombinedOutput(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() > 1 {
			d.t.Fatalf("e2fsck: %v: %s", err, out)
		}
	}
	d.repairs++
	fresh := fmt.Sprintf("%s.repaired-%d", d.img, d.repairs)
	if err := copyFile(d.img, fresh); err != nil {
		d.t.Fatal(err)
	}
	d.img = fresh
	if err := d.mount(); err != nil {
		d.t.Fatalf("mounting %s again: %v", d.Dir, err)
	}
	probe := filepath.Join(d.Dir, ".repair-probe")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		// Not seen since the copy: skipped, saying what the mount and the kernel said; what
		// the test checked before the repair stands (a failure there stays a failure).
		opts, _ := exec.Command("findmnt", "-n", "-o", "SOURCE,OPTIONS", d.Dir).CombinedOutput()
		kern, _ := exec.Command("sh", "-c", "dmesg 2>/dev/null | tail -n 8").CombinedOutput()
		d.t.Skipf("skipped from here: %s is not writable after its repair (%v); mounted %s; the kernel said:\n%s", d.Dir, err, strings.TrimSpace(string(opts)), kern)
	}
	os.Remove(probe)
}

// copyFile copies the file from to a new file to, synced.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	return errors.Join(err, dst.Sync(), dst.Close())
}

// mounted says whether dir is a mount point.
func mounted(dir string) bool {
	return exec.Command("mountpoint", "-q", dir).Run() == nil
}
