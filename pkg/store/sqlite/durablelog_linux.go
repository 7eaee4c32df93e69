package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// syncLog, as a process opens the ledger, copies its write-ahead log into the file and
// empties it (a TRUNCATE checkpoint, as SQLite's last connection does at a clean close), so
// that what SQLite read from the log here, and what this process builds on, is in pages
// written now: durable once the checkpoint's fsync passed.
//
// After a write to the disk fails (a dying disk, a loop or network device out of room), Linux
// marks the pages that failed clean and keeps them in its page cache with the bytes that never
// reached the disk (fsyncgate); fsync reports the failure once, to the process that wrote
// them. A COMMIT whose fsync so failed was refused, but its frames stay readable from the
// cache, and after that process was killed, the next process to open the ledger rebuilds its
// index from them and counts the commit. Its own commits follow those frames in the log and
// their checksums run on from them; its fsyncs pass, since only its own pages are dirty. Once
// the cache lets the failed pages go (memory pressure, an unmount, a power cut), the log on
// the disk holds zeros where they were: SQLite ignores the log from there on, and every
// decision committed after it, answered to agents as recorded, is lost (`ledger check`:
// "damaged at frame N of its write-ahead log, and transactions committed after it are whole";
// wrap and serve refuse to start, and the way on is to drop those decisions). Before
// 2026-12-07 a wrap started after such a kill recorded calls on top of such frames, and its
// receipts were unreadable once the disk was unmounted
// (TestReceiptsOnAFailedCommitsFramesOutliveTheCache: ext4 on a loop device over a full
// tmpfs). Writing the log's pages again does not do: on ext4 a block whose first write failed
// stays unwritten (ext4 logs "failed to convert unwritten extents to written extents --
// potential data loss!"), and a later write of the same page that succeeds, fsync and all,
// still reads back as zeros after an unmount (tried: the same loss).
//
// Only when no other process has the ledger open (none holds a lock on its index, as every
// SQLite connection to it does: /proc/locks): then this process's first connection rebuilt the
// index from the log, and may have counted such frames. A process that lives beside others
// builds on their index, which the process whose COMMIT failed never counted (its next write
// overwrites those frames); the log is theirs to checkpoint as SQLite does. But see logOnDisk
// below for an index that another process rebuilt after the kill.
//
// A checkpoint another process's reader keeps from finishing within checkpointWait, or one the disk has no room for
// (the full-disk rules: the log as it is serves until there is room), leaves the log as it
// is. One that fails with an I/O error refuses the open: the disk fails writes, and what this
// process would record could not be trusted to stay.
//
// The index of a process beside this one need not be one that never counted a failed COMMIT:
// the first process to open the ledger after the kill rebuilt it from the log as the cache
// held it, and that process may be a reader that copies nothing into the file (sqlite3, a
// backup tool, any read-only SQLite open; the ledger views open for writing, and copy it as
// wrap does), or a process whose checkpoint was skipped. A wrap that opened
// while such a reader held its read transaction built on those frames, and its receipts were
// lost with them once the disk was unmounted (TestReceiptsBesideAReaderOfAFailedCommitsFrames:
// check found the log "damaged at frame 20", wrap refused to start). So where the log is left
// as it is, logOnDisk reads it from the disk itself, past the page cache, and refuses the open
// when the index counts frames the disk does not hold.
//
// checkpointWait bounds syncLog's wait for other processes' readers.
const checkpointWait = time.Second

func (s *Store) syncLog(ctx context.Context) error {
	if fi, err := os.Lstat(s.real + "-wal"); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return nil
	}
	if othersUseIndex(s.real + "-shm") {
		return s.logOnDisk()
	}
	c, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	// The checkpoint waits (SQLite's busy handler, holding the write lock) until every other
	// process's reader has moved on to the latest snapshot: 1 s at most here, not the busy
	// timeout (30 s by default), which a long read (an export) would have held the open for.
	if _, err := c.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", min(s.opt.BusyTimeout, checkpointWait).Milliseconds())); err != nil {
		return err
	}
	defer c.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", s.opt.BusyTimeout.Milliseconds()))
	var busy, log, done int64
	err = c.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &log, &done)
	var se *sqlite.Error
	switch {
	case err == nil && busy != 0:
		// A reader kept it from emptying the log (SQLite answers busy in the row).
		return s.logOnDisk()
	case err == nil, errors.Is(err, sql.ErrNoRows):
		return nil
	case errors.As(err, &se) && (se.Code()&0xff == sqlite3.SQLITE_FULL || se.Code()&0xff == sqlite3.SQLITE_BUSY):
		return s.logOnDisk()
	case errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_IOERR:
		return fmt.Errorf("ledger %s: copying its write-ahead log into the file failed (%w; the kernel's log says, `dmesg`): what this process would record could not be trusted to stay; nothing was changed (`effectfence ledger ls`, `show` and `export` read it at rest meanwhile); open it again once the disk is repaired, and keep using this ledger, not another file: %w", s.path, ErrDiskFailsWrites, err)
	}
	return err
}

// othersUseIndex says whether a process other than this one holds a POSIX lock on the file at
// shm (a ledger's index), as /proc/locks shows; false when there is no such file, true when
// /proc/locks cannot be read (nothing is then known, and nothing is done). A lock counts when
// it names the index's device and inode, or its inode and the process has the index open (on
// btrfs stat names a subvolume's device, /proc/locks the file system's): inode numbers alone
// repeat across file systems, and a lock of another test's ledger on a loop device of its own
// (inode 13 there too) was taken for a process beside this one, 1 run in 2 on a busy machine.
func othersUseIndex(shm string) bool {
	fi, err := os.Stat(shm)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	dev := fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev))
	self, other := os.Getpid(), false
	ok = eachPOSIXLock(func(pid int, d string, ino uint64) {
		if pid != self && ino == st.Ino && !other {
			other = d == dev || hasOpen(pid, fi)
		}
	})
	return other || !ok
}

// hasOpen says whether process pid has the file fi open, as its descriptors show.
func hasOpen(pid int, fi os.FileInfo) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if f, err := os.Stat(filepath.Join(dir, fd.Name())); err == nil && os.SameFile(f, fi) {
			return true
		}
	}
	return false
}

// logOnDisk refuses (an error naming the ledger) when the index beside the ledger counts
// committed frames of its log that the disk does not hold: frames whose write failed, which
// Linux keeps in its page cache, clean, until it lets them go (see syncLog). It compares the
// index's count with the frames a read of the log that bypasses the page cache (O_DIRECT)
// verifies; such a read first writes back what is dirty, so only a write that failed reads
// otherwise than through the cache. Where the file system reads no file so (tmpfs, which has
// no disk to lose), nothing is refused. A log and index another process is changing as they
// are read are read again, for up to 200 ms, before a difference is believed.
func (s *Store) logOnDisk() error {
	log := s.real + "-wal"
	for try := 0; ; try++ {
		sh, err := readShmHeader(s.real + "-shm")
		if err != nil || !sh.ok || sh.committed == 0 {
			return err
		}
		cached, csalt, err := walFramesIn(log, false)
		if err != nil || cached < sh.committed || csalt != sh.salt {
			// Not the log the index counts (begun afresh meanwhile), or one that lost frames,
			// which walLost judges: nothing here to compare.
			if err == nil && try < 20 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return nil
		}
		onDisk, dsalt, err := walFramesIn(log, true)
		if errors.Is(err, errNoDirectRead) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ledger %s: reading its write-ahead log from the disk failed (the disk may fail; the kernel's log says, `dmesg`): what this process would record on top of it could not be trusted to stay; nothing was changed: %w", s.path, err)
		}
		if dsalt == csalt && onDisk >= sh.committed {
			return nil
		}
		if try < 20 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		return fmt.Errorf("ledger %s: its index (%s-shm) counts %d committed frames of its write-ahead log, but the disk holds %d of them: a write of the log failed (the disk fails writes, or failed them; the kernel's log says, `dmesg`), the process that made it ended, and the frames are in this machine's memory only, where a process that has the ledger open now read them; what this process would record after them would be lost with them: nothing was changed. Stop the processes that have the ledger open (a reader such as sqlite3 or a backup tool among them; /proc/locks lists them by the index's inode) and start this one again once the disk takes writes: the first to open it then copies the log into the file (`effectfence ledger check --ledger %s` tells whether the disk holds the ledger whole)",
			s.path, s.real, sh.committed, onDisk, s.path)
	}
}

// errNoDirectRead: the file system reads no file bypassing the page cache.
var errNoDirectRead = errors.New("no direct read")

// walFramesIn is walCommitted of the log at path, read through the page cache or, direct, from
// the disk (O_DIRECT); 0 frames when there is no log.
func walFramesIn(path string, direct bool) (frames uint32, salt [8]byte, err error) {
	if !direct {
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, os.ErrNotExist) {
			return 0, salt, nil
		}
		if err != nil {
			return 0, salt, err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return 0, salt, err
		}
		return framesOf(f, fi.Size())
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_DIRECT, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return 0, salt, nil
	case errors.Is(err, unix.EINVAL):
		return 0, salt, errNoDirectRead
	case err != nil:
		return 0, salt, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, salt, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	dr, err := newDirectReader(fd)
	if err != nil {
		return 0, salt, err
	}
	defer dr.close()
	return framesOf(dr, st.Size)
}

// framesOf is walCommitted's count and salt of the log of size bytes r reads (0 frames when
// it has no header SQLite would read).
func framesOf(r io.ReaderAt, size int64) (uint32, [8]byte, error) {
	n, salt, ok, _, err := walCommitted(r, size, nil)
	if !ok {
		n = 0
	}
	return n, salt, err
}

// directReader reads a file opened with O_DIRECT at any offset and length, through a buffer
// aligned as direct reads need (a page: mapped memory), a chunk at a time.
type directReader struct {
	fd    int
	buf   []byte
	at, n int64 // the file's bytes [at, at+n) are in buf
}

const directChunk = 1 << 20

func newDirectReader(fd int) (*directReader, error) {
	buf, err := unix.Mmap(-1, 0, directChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	return &directReader{fd: fd, buf: buf, at: -1}, nil
}

func (d *directReader) close() { _ = unix.Munmap(d.buf) }

func (d *directReader) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		o := off + int64(done)
		if d.at < 0 || o < d.at || o >= d.at+d.n {
			d.at = o &^ (4096 - 1)
			n, err := unix.Pread(d.fd, d.buf, d.at)
			for errors.Is(err, unix.EINTR) {
				n, err = unix.Pread(d.fd, d.buf, d.at)
			}
			if errors.Is(err, unix.EINVAL) {
				d.at = -1
				return done, errNoDirectRead
			}
			if err != nil {
				d.at = -1
				return done, err
			}
			d.n = int64(n)
			if o >= d.at+d.n {
				return done, io.EOF
			}
		}
		done += copy(p[done:], d.buf[o-d.at:d.n])
	}
	return done, nil
}
