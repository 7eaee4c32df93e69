package sqlite

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// indexWatch finds the descriptor through which this process's SQLite maps a ledger's
// shared-memory index (<ledger>-shm), and tells when that file was removed while mapped.
type indexWatch struct {
	fd int         // -1 until found
	fi os.FileInfo // the index as the descriptor showed it
	// misses counts calls since a look through every descriptor found none: the next looks
	// only every 64th call, so that a process with many descriptors does not read them all
	// for each transaction.
	misses int
}

// removed reports whether this process has the index of the ledger whose real path is real
// open while no name leads to it any more (deleted, or replaced by another file). A process
// with no descriptor on it (its connections all closed, so the next one opens whatever
// index is there) has nothing removed. One stat per call once the descriptor is known.
func (w *indexWatch) removed(real string) bool {
	name := real + "-shm"
	if w.fd >= 0 {
		// fstat of the descriptor sees what a stat of /proc/self/fd/N sees, at an eighth of
		// its cost (0.55 against 4.4 µs here), once for every write transaction.
		// A "no" is sure: the descriptor is the index's file, and that file has its name. A
		// "yes" is not: SQLite closes the index's descriptor when the process's last
		// connection closes (deleting the file if no process has the ledger open), and the
		// number and the inode number may both be reused by another file, such as the next
		// -wal; that file, seen as the index, has no name "-shm". The scan below, which reads
		// each descriptor's name, decides.
		var st syscall.Stat_t
		if err := syscall.Fstat(w.fd, &st); err == nil && sameInode(&st, w.fi) && st.Nlink != 0 && !renamed(w.fi, name) {
			return false
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
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if again, err := os.Readlink(p); err != nil || again != target {
			continue // closed and opened again between the two looks: another file now
		}
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			w.fd, w.fi, w.misses = fd, fi, 0
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

// sameInode reports whether st (an fstat) is the file fi describes.
func sameInode(st *syscall.Stat_t, fi os.FileInfo) bool {
	was, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Dev == was.Dev && st.Ino == was.Ino
}
