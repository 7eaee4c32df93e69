//go:build linux

package history

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The full-disk fault (Config.FullDisk): the SQLite ledger, and with it everything wrap keeps
// beside it (its -wal and -shm, the spool <ledger>.spool/), is on a small tmpfs of the run's
// own, and the nemesis fills that file system (a filler file written until ENOSPC, topped up
// while it lasts: what a process frees, such as a drained spool file, is taken again) and
// frees it (the filler removed) a random time later. The effects file, the wraps' logs and
// history.json stay in Config.Dir, on the disk the run was given.

// DefaultDiskSize is the tmpfs of a FullDisk run when Config.DiskSize is not set: room for
// a few minutes' ledger with its log and spool several times over, and filled in a few
// milliseconds.
const DefaultDiskSize = 64 << 20

// Window is a span of a run (ms since it began) during which the ledger's disk was full.
type Window struct {
	FromMs int64 `json:"from_ms"`
	ToMs   int64 `json:"to_ms"`
}

// mountDisk mounts a tmpfs of size bytes at dir (created), for the ledger of a FullDisk run.
func mountDisk(dir string, size int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)+",mode=0700"); err != nil {
		return fmt.Errorf("history: the full-disk fault needs a small file system of its own: mounting a tmpfs at %s: %w (run as root)", dir, err)
	}
	return nil
}

// unmountDisk unmounts dir, trying again for a few seconds while a process that has just
// stopped still holds a file there, then detaching it (lazily unmounted once the last file
// is closed): no mount of the run outlives it.
func unmountDisk(dir string) error {
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err = syscall.Unmount(dir, 0); err == nil || errors.Is(err, syscall.EINVAL) || time.Now().After(deadline) {
			break // EINVAL: not a mount point (any more)
		}
	}
	if err != nil && !errors.Is(err, syscall.EINVAL) {
		if derr := syscall.Unmount(dir, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("history: unmounting the ledger's tmpfs %s: %v; detaching it: %w", dir, err, derr)
		}
	}
	return nil
}

// fillerName is the file that fills the ledger's disk.
const fillerName = "filler"

// fill writes the filler in dir (appending to it when it is there) until its file system has
// no room left, and returns how many bytes it added.
func fill(dir string) (int64, error) {
	f, err := os.OpenFile(filepath.Join(dir, fillerName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if errors.Is(err, syscall.ENOSPC) {
		return 0, nil // not even room for its inode
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var added int64
	chunk := make([]byte, 1<<20)
	for _, n := range []int{len(chunk), 4096, 512} { // the last pages of room, smaller than a chunk
		for {
			w, err := f.Write(chunk[:n])
			added += int64(w)
			if errors.Is(err, syscall.ENOSPC) || (err == nil && w < n) {
				break
			}
			if err != nil {
				return added, err
			}
		}
	}
	return added, nil
}

// fullDisk fills the ledger's disk, keeps it full for d (topped up every 100 ms) and frees it,
// recording the window.
func (r *run) fullDisk(d time.Duration) {
	defer r.filling.Store(false)
	from := r.ms()
	added, err := fill(r.disk)
	if err != nil {
		r.logf("filling the ledger's disk: %v", err)
	}
	r.fault(FaultFullDisk, fmt.Sprintf("the ledger's tmpfs (%d bytes written to fill it), for %s", added, d))
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(min(100*time.Millisecond, time.Until(end)))
		if _, err := fill(r.disk); err != nil {
			r.logf("topping up the ledger's full disk: %v", err)
		}
	}
	if err := os.Remove(filepath.Join(r.disk, fillerName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		// The run cannot go on with the disk full for ever: nothing could be checked.
		err = fmt.Errorf("history: freeing the ledger's disk: %w", err)
		r.logf("%v", err)
		r.dbErr.CompareAndSwap(nil, &err)
	}
	r.mu.Lock()
	r.windows = append(r.windows, Window{FromMs: from, ToMs: r.ms()})
	r.mu.Unlock()
}

// keepLedger copies the SQLite ledger's files, as the wraps left them, from the tmpfs (which
// ends with the run) into the run's directory, where `effectfence ledger ls --ledger
// DIR/ledger.db` reads them afterwards.
func (r *run) keepLedger() {
	base := filepath.Base(r.direct)
	for _, suffix := range []string{"", "-wal"} {
		if err := copyFile(r.direct+suffix, filepath.Join(r.cfg.Dir, base+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.logf("keeping the ledger's %s: %v", base+suffix, err)
		}
	}
	spool := r.direct + ".spool"
	ents, _ := os.ReadDir(spool)
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := os.MkdirAll(filepath.Join(r.cfg.Dir, base+".spool"), 0o700); err == nil {
			err = copyFile(filepath.Join(spool, e.Name()), filepath.Join(r.cfg.Dir, base+".spool", e.Name()))
			if err != nil {
				r.logf("keeping the ledger's spool file %s: %v", e.Name(), err)
			}
		}
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// diskSummary says how often and how long the ledger's disk was full, what the calls begun
// meanwhile were answered, and how many outcomes wrap had to hold in memory.
func (r *Report) diskSummary() string {
	var total int64
	for _, w := range r.DiskFull {
		total += w.ToMs - w.FromMs
	}
	during := map[string]int{}
	room := 0
	for _, o := range r.Ops {
		if !r.fullAt(o.StartMs) {
			continue
		}
		during[o.Answer]++
		if o.Answer == AnswerRefused && strings.Contains(o.Text, "no room") {
			room++
		}
	}
	return fmt.Sprintf("disk full: %d times, %.1fs in all; calls begun while full: %s (%d refusals saying the disk has no room); outcomes held in a wrap's memory, in neither the ledger nor the spool: %d\n",
		len(r.DiskFull), float64(total)/1000, counts(during), room, r.HeldOutcomes)
}

// fullAt reports whether the ledger's disk was full at ms.
func (r *Report) fullAt(ms int64) bool {
	for _, w := range r.DiskFull {
		if ms >= w.FromMs && ms <= w.ToMs {
			return true
		}
	}
	return false
}

// heldLine is what wrap logs when an outcome is in neither the ledger nor its spool.
const heldLine = "is in neither the ledger nor its spool; the call's answer waits"

// countHeld counts the outcomes the wraps' logs in dir say were held in memory.
func countHeld(dir string) int {
	logs, _ := filepath.Glob(filepath.Join(dir, "wrap-*.log"))
	n := 0
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err == nil {
			n += strings.Count(string(b), heldLine)
		}
	}
	return n
}
