package diskfull

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Failing is a block device that starts failing its writes: an ext4 (or another file
// system) on a loop device whose backing file is a sparse file on a small tmpfs of the test's
// own. Once the tmpfs is full (Break), every write of the loop device to a block of the file
// not written before fails (the kernel logs "critical space allocation error"; ext4 sees an I/O
// error: fsync returns ENOSPC or EIO, the journal aborts, and the file system turns read-only
// whatever its errors= option), while writes over blocks written before still land. Nothing
// is faked: the file system sees what a dying disk shows it.
type Failing struct {
	t       testing.TB
	fstype  string
	opts    string
	back    string // the tmpfs holding the image
	img     string
	loop    string
	filler  string
	Dir     string
	repairs int
}

// MountFailing makes and mounts a Failing for the test: fstype ("ext4", "xfs", "btrfs") on a
// 64 MiB sparse image, mounted with opts (such as "errors=continue"; "" for none). With
// journal (ext4 only), the journal's blocks are given room in the tmpfs first, so the journal
// keeps working once the device fails: only writes of data and of metadata to new blocks
// fail, ext4 does not abort its journal, and under errors=continue the file system stays
// writable, fsync returning the error once (ENOSPC or EIO) and the page cache keeping clean
// copies of pages that never reached the device (fsyncgate), until they are evicted. The test's
// cleanup unmounts it, frees the loop device and unmounts the tmpfs, lazily if they are still
// busy. It skips the test, saying why, where that cannot be made (not root, no mkfs or
// losetup, no loop device).
func MountFailing(t testing.TB, fstype, opts string, journal bool) *Failing {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: a failing disk of the test's own (a loop device on a tmpfs) needs root")
	}
	for _, tool := range []string{"mkfs." + fstype, "losetup", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipped: %s is not installed", tool)
		}
	}
	base := t.TempDir()
	d := &Failing{t: t, fstype: fstype, opts: opts, back: filepath.Join(base, "back"), Dir: filepath.Join(base, "mnt")}
	for _, dir := range []string{d.back, d.Dir} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Room for the image's blocks written by mkfs and the test, and for a repaired copy.
	if err := syscall.Mount("tmpfs", d.back, "tmpfs", 0, "size=192m"); err != nil {
		t.Skipf("skipped: mounting a tmpfs at %s: %v", d.back, err)
	}
	// Registered first, so it runs last: after the file system and the loop device are gone.
	t.Cleanup(func() {
		if err := syscall.Unmount(d.back, 0); err != nil {
			t.Logf("unmounting %s: %v; detaching it", d.back, err)
			_ = syscall.Unmount(d.back, syscall.MNT_DETACH)
		}
	})
	d.img = filepath.Join(d.back, "disk.img")
	f, err := os.Create(d.img)
	if err == nil {
		size := int64(64 << 20)
		if fstype == "btrfs" {
			size = 128 << 20 // mkfs.btrfs's least
		}
		err = f.Truncate(size)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	// ext4 in blocks of a page, as the tmpfs keeps the image: a write to a block the image had
	// not used always meets a page the tmpfs has no room for (with 1 KiB blocks, mkfs's
	// choice for so small a file system, a new block could share a page with one written
	// before, and its write landed).
	mkfs := []string{"-q", "-F", "-b", "4096"}
	switch fstype {
	case "xfs", "btrfs":
		mkfs = []string{"-q", "-f"}
	}
	if out, err := exec.Command("mkfs."+fstype, append(mkfs, d.img)...).CombinedOutput(); err != nil {
		t.Skipf("skipped: mkfs.%s: %v: %s", fstype, err, out)
	}
	if journal {
		d.roomForJournal()
	}
	if err := d.attach(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	// Cleanups run last first: this one after the processes using the mount were stopped.
	t.Cleanup(d.detach)
	return d
}

// roomForJournal allocates the tmpfs pages under the ext4 journal's blocks (mkfs leaves them
// holes), read from debugfs: "(0-4095):16385-20480" in 1 KiB blocks.
func (d *Failing) roomForJournal() {
	d.t.Helper()
	if d.fstype != "ext4" {
		d.t.Fatalf("a working journal on a failing %s: only ext4's is placed", d.fstype)
	}
	out, err := exec.Command("debugfs", "-R", "stat <8>", d.img).Output()
	if err != nil {
		d.t.Skipf("skipped: debugfs: %v", err)
	}
	size, err := exec.Command("dumpe2fs", "-h", d.img).Output()
	if err != nil {
		d.t.Skipf("skipped: dumpe2fs: %v", err)
	}
	var bs int64
	for _, line := range strings.Split(string(size), "\n") {
		if v, ok := strings.CutPrefix(line, "Block size:"); ok {
			fmt.Sscan(strings.TrimSpace(v), &bs)
		}
	}
	f, err := os.OpenFile(d.img, os.O_RDWR, 0)
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for _, field := range strings.Fields(string(out)) {
		_, ext, ok := strings.Cut(field, "):")
		if !ok {
			continue
		}
		var from, to int64
		if _, err := fmt.Sscanf(ext, "%d-%d", &from, &to); err != nil {
			continue
		}
		if err := syscall.Fallocate(int(f.Fd()), 0, from*bs, (to-from+1)*bs); err != nil {
			d.t.Fatalf("fallocate: %v", err)
		}
		n++
	}
	if n == 0 || bs == 0 {
		d.t.Fatalf("no journal extents in debugfs's answer (block size %d):\n%s", bs, out)
	}
}

// attach makes a loop device of the image and mounts it.
func (d *Failing) attach() error {
	out, err := exec.Command("losetup", "-f", "--show", d.img).CombinedOutput()
	if err != nil {
		return fmt.Errorf("losetup %s: %v: %s", d.img, err, out)
	}
	d.loop = strings.TrimSpace(string(out))
	args := []string{"-t", d.fstype}
	if d.opts != "" {
		args = append(args, "-o", d.opts)
	}
	if out, err := exec.Command("mount", append(args, d.loop, d.Dir)...).CombinedOutput(); err != nil {
		_ = exec.Command("losetup", "-d", d.loop).Run()
		err = fmt.Errorf("mount %s on %s: %v: %s", d.loop, d.Dir, err, out)
		d.loop = ""
		return err
	}
	return nil
}

// detach unmounts the file system (trying again for 10 s while a process ends, then lazily)
// and frees its loop device.
func (d *Failing) detach() {
	if d.loop == "" {
		return
	}
	if mounted(d.Dir) {
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var out []byte
			if out, err = exec.Command("umount", d.Dir).CombinedOutput(); err == nil {
				break
			}
			if time.Now().After(deadline) {
				d.t.Logf("umount %s: %v: %s; detaching it (umount -l)", d.Dir, err, strings.TrimSpace(string(out)))
				_ = exec.Command("umount", "-l", d.Dir).Run()
				break
			}
		}
	}
	// A loop device still open (a lazy unmount) is freed by the kernel once it is closed.
	if out, err := exec.Command("losetup", "-d", d.loop).CombinedOutput(); err != nil {
		d.t.Logf("losetup -d %s: %v: %s", d.loop, err, out)
	}
	d.loop = ""
}

// Break fills the tmpfs under the image: from now on the device fails every write to a block
// the image had not used.
func (d *Failing) Break() {
	d.t.Helper()
	if d.filler == "" {
		d.filler = Fill(d.t, d.back)
	}
}

// Mend frees the tmpfs under the image again: the device takes every write. What the file
// system made of the failures (a journal aborted, read-only) stays until Repair.
func (d *Failing) Mend() {
	d.t.Helper()
	if d.filler != "" {
		if err := os.Remove(d.filler); err != nil {
			d.t.Fatal(err)
		}
		d.filler = ""
	}
}

// Options are the mount's options as the kernel shows them (/proc/self/mountinfo's, and the
// super block's: ext4 adds emergency_ro once it turned itself read-only).
func (d *Failing) Options() string {
	out, err := exec.Command("findmnt", "-n", "-o", "OPTIONS", d.Dir).Output()
	if err != nil {
		return "not mounted"
	}
	return strings.TrimSpace(string(out))
}

// ReadOnly says whether a file can be made on the file system.
func (d *Failing) ReadOnly() bool {
	probe := filepath.Join(d.Dir, ".probe")
	err := os.WriteFile(probe, nil, 0o600)
	os.Remove(probe)
	return errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EIO)
}

// Repair mends the device, unmounts the file system, checks the image (e2fsck -fy,
// xfs_repair; btrfs is mounted again unchecked, its copy-on-write trees whole) and mounts a copy of it on a loop device of its own (see Ext4.Repair for why a
// copy): what a person does once the disk is back. Every process using it must have ended.
// What the file system held only in the page cache is gone then, as after a power cut.
func (d *Failing) Repair() {
	d.t.Helper()
	d.Mend()
	d.detach()
	var check *exec.Cmd
	switch d.fstype {
	case "ext4":
		check = exec.Command("e2fsck", "-fy", d.img)
	case "xfs":
		check = exec.Command("xfs_repair", d.img)
	}
	if check != nil {
		// e2fsck exits 1 when it corrected the file system: not an error here.
		if out, err := check.CombinedOutput(); err != nil {
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() > 1 {
				d.t.Fatalf("%s: %v: %s", check, err, out)
			}
		}
	}
	d.repairs++
	fresh := fmt.Sprintf("%s.repaired-%d", d.img, d.repairs)
	if out, err := exec.Command("cp", "--sparse=always", d.img, fresh).CombinedOutput(); err != nil {
		d.t.Fatalf("copying %s: %v: %s", d.img, err, out)
	}
	os.Remove(d.img)
	d.img = fresh
	if err := d.attach(); err != nil {
		d.t.Fatalf("mounting %s again: %v", d.Dir, err)
	}
	if d.ReadOnly() {
		d.t.Fatalf("%s is not writable after its repair", d.Dir)
	}
}
