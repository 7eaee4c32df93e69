package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
// builds on their index, which never counted a failed COMMIT (and, by their writes since,
// on frames that overwrote it); the log is theirs to checkpoint as SQLite does.
//
// A checkpoint another process's reader keeps from finishing within checkpointWait, or one the disk has no room for
// (the full-disk rules: the log as it is serves until there is room), leaves the log as it
// is. One that fails with an I/O error refuses the open: the disk fails writes, and what this
// process would record could not be trusted to stay.
// checkpointWait bounds syncLog's wait for other processes' readers.
const checkpointWait = time.Second

func (s *Store) syncLog(ctx context.Context) error {
	if fi, err := os.Lstat(s.real + "-wal"); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return nil
	}
	if othersUseIndex(s.real + "-shm") {
		return nil
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
	case err == nil, errors.Is(err, sql.ErrNoRows):
		return nil
	case errors.As(err, &se) && (se.Code()&0xff == sqlite3.SQLITE_FULL || se.Code()&0xff == sqlite3.SQLITE_BUSY):
		return nil
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
