package sqlite

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// indexWatch finds the descriptor through which this process's SQLite maps a ledger's
// shared-memory index (<ledger>-shm), and tells when that file was removed while mapped.
type indexWatch struct {
	fd int         // -1 until found
	fi os.FileInfo // the index as the descriptor showed it
	// born is the index's birth time, where the file system keeps one (born.Sec != 0): an
	// inode number can be given to a new file once the index is deleted and closed, a birth
	// time tells the two apart.
	born unix.StatxTimestamp
	// misses counts calls since a look through every descriptor found none: the next looks
	// only every 64th call, so that a process with many descriptors does not read them all
	// for each transaction.
	misses int
}

// removed reports whether this process has the index of the ledger whose real path is real
// open while its name no longer leads to it (deleted, replaced by another file, or moved
// away where the file system keeps birth times). A process with no descriptor on it (its
// connections all closed, so the next one opens whatever index is there) has nothing
// removed. A statx of the descriptor and a stat of the name per call once the descriptor is
// known.
func (w *indexWatch) removed(real string) bool {
	name := real + "-shm"
	if w.fd >= 0 {
		// A statx of the descriptor, once for every write transaction, sees what a stat of
		// /proc/self/fd/N would, at a fraction of its cost. A "no" is sure: the descriptor
		// is the index's file, and that file has its name. A "yes" is sure only when the
		// file was born when the index was: SQLite closes the index's descriptor when the
		// process's last connection closes (deleting the file if no process has the ledger
		// open), and the number and the inode number may both be reused by another file,
		// such as the next -wal, which has no name "-shm". Otherwise the scan below, which
		// reads each descriptor's name, decides.
		var sx unix.Statx_t
		if err := unix.Statx(w.fd, "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_NLINK|unix.STATX_BTIME, &sx); err == nil && sameStatx(&sx, w.fi) {
			if sx.Nlink != 0 && !renamed(w.fi, name) {
				return false
			}
			if w.born.Sec != 0 && sx.Mask&unix.STATX_BTIME != 0 && sx.Btime == w.born {
				return true // deleted, or its name leads to another file (one moved away too)
			}
		}
		w.fd = -1
	} else if w.misses++; w.misses%64 != 1 {
		return false
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false
	}
	for _, e := range ents {
		p := filepath.Join("/proc/self/fd", e.Name())
		target, err := os.Readlink(p)
		if err != nil || (target != name && target != name+" (deleted)") {
			continue
		}
		if testHookIndexScan != nil {
			testHookIndexScan(e.Name())
		}
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		var sx unix.Statx_t
		if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &sx) != nil || !sameStatx(&sx, fi) {
			continue // another file already
		}
		if again, err := os.Readlink(p); err != nil || again != target {
			continue // closed and opened again between the looks: another file now
		}
		w.fd, w.fi, w.misses, w.born = fd, fi, 0, unix.StatxTimestamp{}
		if sx.Mask&unix.STATX_BTIME != 0 {
			w.born = sx.Btime
		}
		return gone(fi, name)
	}
	return false
}

// gone reports whether the open index fi has no name, or name leads to another file.
func gone(fi os.FileInfo, name string) bool {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink == 0 {
		return true
	}
	return renamed(fi, name)
}

// testHookIndexScan, when set, runs between a descriptor's two looks in removed's scan.
var testHookIndexScan func(fd string)

// renamed reports whether name leads to another file than fi.
func renamed(fi os.FileInfo, name string) bool {
	at, err := os.Stat(name)
	return err == nil && !os.SameFile(at, fi)
}

// sameStatx reports whether sx (a statx) has the device and inode number fi has.
func sameStatx(sx *unix.Statx_t, fi os.FileInfo) bool {
	was, ok := fi.Sys().(*syscall.Stat_t)
	return ok && unix.Mkdev(sx.Dev_major, sx.Dev_minor) == uint64(was.Dev) && sx.Ino == was.Ino
}
