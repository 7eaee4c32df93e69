package sqlite

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// checkOtherName refuses a ledger file that another process has open under another name: the
// file moved (mv) or given a second name (a hard link) while that process kept it open. That
// process writes its decisions to the write-ahead log beside the name it opened, which a
// process opening this name never reads: a duplicate here would find no receipt and run again.
//
// SQLite's POSIX locks (/proc/locks) show which processes have the file open: every
// connection to a ledger holds a shared lock on it for as long as it is open, and one on the
// index of the log it uses (NAME-shm). A process that locks this file but not the index beside
// this name, and has a log or index open beside another name of this file (or beside a name
// no file has any more, the file having moved from it), uses that name. Only such evidence
// refuses, and only when it stays for otherNameWait: a process opening or closing the ledger
// under this name (or creating it, before it is a WAL database) holds the file's lock for a
// while without the index's, but has no other name open. Processes this one cannot see
// (/proc/locks leaves out the locks of processes outside its PID namespace: from inside a
// container, a process on the host or in another container) or whose descriptors it may not
// read are not refused, nor is anything when /proc/locks cannot be read.
func checkOtherName(path string) error {
	pid, name := otherNameHolder(path, otherNameWait)
	if pid == 0 {
		return nil
	}
	return &FileError{Path: path,
		Problem: fmt.Sprintf("is open in another process under another name (process %d uses it as %s): the file was moved or given a second name while that process had it open, and it records its decisions in the write-ahead log beside that name, which a process using this name never reads", pid, name),
		Advice:  "stop that process (closing the ledger, it copies what its log holds into the file, wherever the file is now), then start again under this name; nothing was changed"}
}

// absPath is path made absolute (as it is, if that fails): the names in /proc are absolute,
// and a relative path compared with them is another name even when it names the same file
// (`ledger check --ledger ledger.db` called a holder that had replaced nothing a holder "under
// another name", naming the path it was given).
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// otherNameWait is how long the evidence that a process uses another name must stay before
// it refuses.
const otherNameWait = 200 * time.Millisecond

// otherNameHolder returns a process that uses the file at path under another name, and that
// name (see checkOtherName), if it still does after wait; 0 and "" when there is none, or
// when this cannot be seen.
func otherNameHolder(path string, wait time.Duration) (int, string) {
	real := realPath(absPath(path))
	var db, shm syscall.Stat_t
	if syscall.Stat(real, &db) != nil {
		return 0, ""
	}
	if syscall.Stat(real+"-shm", &shm) != nil {
		shm = syscall.Stat_t{} // no index beside this name: nobody uses it
	}
	look := func() map[int]string {
		found := map[int]string{}
		for pid := range lockersWithout(db, shm) {
			if name := sqliteNameOf(pid, real); name != "" {
				found[pid] = name
			}
		}
		return found
	}
	return stays(wait, look)
}

// stays returns a process that every look finds, from the first until wait has passed, with
// what the last look said of it (0 and the zero value: none). Evidence read from /proc while
// processes open and close the ledger can be a moment's: a descriptor listed, then closed
// before it is read.
func stays[V any](wait time.Duration, look func() map[int]V) (int, V) {
	found := look()
	for deadline := time.Now().Add(wait); len(found) > 0 && time.Now().Before(deadline); {
		time.Sleep(wait / 10)
		still := look()
		for pid := range found {
			v, ok := still[pid]
			if !ok {
				delete(found, pid)
				continue
			}
			found[pid] = v
		}
	}
	for pid, v := range found {
		return pid, v
	}
	var none V
	return 0, none
}

// replacedIndexUser returns a process other than this one that has the ledger file at path
// open and uses an index beside this name that is no longer there (PATH-shm deleted, or
// replaced by another file, while it had it open), if it still does after a while; 0 when there
// is none, or when this cannot be seen (as for otherNameHolder). The evidence must stay for otherNameWait. Such a process records
// nothing more on Linux (its index watch), or would write through an index that no process
// opening the ledger now shares. A process that merely stopped (SIGSTOP, a debugger) with its
// index in place holds the same locks and is not one: the index it has open is still at the
// name. A last connection closing deletes its index before closing it: that passes within
// the wait.
func replacedIndexUser(path string) int {
	wait := otherNameWait
	real := realPath(absPath(path))
	db, err := os.Stat(real)
	if err != nil {
		return 0
	}
	st, ok := db.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	look := func() map[int]bool {
		shm, _ := os.Stat(real + "-shm") // nil: no index at the name
		pids, found := map[int]bool{}, map[int]bool{}
		self := os.Getpid()
		eachPOSIXLock(func(pid int, _ string, ino uint64) {
			if pid != self && ino == uint64(st.Ino) {
				pids[pid] = true
			}
		})
		for pid := range pids {
			if usesReplacedIndex(pid, real, db, shm) {
				found[pid] = true
			}
		}
		return found
	}
	pid, _ := stays(wait, look)
	return pid
}

// usesReplacedIndex says whether process pid has the ledger file db (at real) open and a file
// named real-shm that is not shm (the file at that name now; nil: none), by its descriptors.
func usesReplacedIndex(pid int, real string, db, shm os.FileInfo) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	open, replaced := false, false
	for _, fd := range fds {
		fi, err := os.Stat(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue
		}
		if os.SameFile(fi, db) {
			open = true
			continue
		}
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue
		}
		// The kernel names a file removed from the name it was opened by "PATH (deleted)",
		// whether or not it keeps another name (a hard link).
		if name, ok := strings.CutSuffix(target, " (deleted)"); ok {
			if _, err := os.Lstat(target); err != nil {
				target = name
			}
		}
		if target == real+"-shm" && (shm == nil || !os.SameFile(fi, shm)) {
			replaced = true
		}
	}
	return open && replaced
}

// lockersWithout returns the processes other than this one, by pid, that hold a POSIX lock on
// the file db and none on the file shm (shm's zero value: no such file), as far as /proc/locks
// tells. A lock there names its file by inode and by its file system's device, which need not
// be the device stat reports (btrfs reports a subvolume's, /proc/locks the file system's):
// a lock on db is one on its inode on any device, and one on shm is one on shm's inode on the
// same device as that (the two files are in one directory). sqliteNameOf then makes sure the
// process has db itself open.
func lockersWithout(db, shm syscall.Stat_t) map[int]bool {
	onDB, onShm := map[int]map[string]bool{}, map[int]map[string]bool{}
	self := os.Getpid()
	if !eachPOSIXLock(func(pid int, dev string, ino uint64) {
		switch {
		case pid == self:
		case ino == uint64(db.Ino):
			addLock(onDB, pid, dev)
		case shm.Ino != 0 && ino == uint64(shm.Ino):
			addLock(onShm, pid, dev)
		}
	}) {
		return nil
	}
	found := map[int]bool{}
	for pid, devs := range onDB {
		for dev := range devs {
			if !onShm[pid][dev] {
				found[pid] = true
			}
		}
	}
	return found
}

// eachPOSIXLock calls fn with every POSIX lock in /proc/locks: the process holding it (or
// waiting for it), its file's device as /proc/locks names it and its inode. It reports whether
// /proc/locks could be read to the end.
func eachPOSIXLock(fn func(pid int, dev string, ino uint64)) bool {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return false
	}
	defer f.Close()
	in := bufio.NewScanner(f)
	for in.Scan() {
		// "1: POSIX  ADVISORY  READ 23506 fe:00:9979385 1073741826 1073742335"; a waiter's
		// line has "->" after the number.
		fields := strings.Fields(in.Text())
		if len(fields) > 1 && fields[1] == "->" {
			fields = append(fields[:1], fields[2:]...)
		}
		if len(fields) < 6 || fields[1] != "POSIX" {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil || pid <= 0 {
			continue
		}
		i := strings.LastIndexByte(fields[5], ':')
		if i < 0 {
			continue
		}
		ino, err := strconv.ParseUint(fields[5][i+1:], 10, 64)
		if err != nil {
			continue
		}
		fn(pid, fields[5][:i], ino)
	}
	return in.Err() == nil
}

// foreignLogUser returns a process that uses the write-ahead log beside the ledger name real
// (resolved) for a file other than the one now at real (0: none), as /proc/locks and the
// processes' descriptors show. SQLite holds a lock on a log's index (real-shm) for as long as
// it has the log open, and opens the ledger file before the index (and closes it after), so a
// process that locks the index but has not the file at real open has another file open under
// this name: the file at real was moved here, or put here in place of that one, while the
// process kept it. This process counts too (another store of it). A lock on the index's inode
// counts only when the process has the index open (an inode number of another file system's
// file is not it); processes whose descriptors this one may not read, or that it cannot see
// (another PID namespace), count as none. The evidence must stay for otherNameWait: a process
// closing its last connection to this very file closes the index, then the file, and a look
// at its descriptors that read the index's before it was closed and the file's after found
// the one without the other (TestNewLedgerOpenedAtOnceIsNotTakenForEmptied failed so, 1 run
// in 30 under load, 2026-12-07: a process of six opening a new ledger at once was refused, the
// "other file" named being the very file at the name).
func foreignLogUser(real string) int {
	shm, err := os.Stat(real + "-shm")
	if err != nil {
		return 0
	}
	st, ok := shm.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	ours, err := os.Stat(real)
	if err != nil {
		return 0
	}
	look := func() map[int]bool {
		pids, found := map[int]bool{}, map[int]bool{}
		eachPOSIXLock(func(pid int, _ string, ino uint64) {
			if ino == uint64(st.Ino) {
				pids[pid] = true
			}
		})
		for pid := range pids {
			if hasShm, hasFile, ok := holds(pid, shm, ours); ok && hasShm && !hasFile {
				found[pid] = true
			}
		}
		return found
	}
	pid, _ := stays(otherNameWait, look)
	return pid
}

// holds says whether process pid has the files shm and db open (by stat of its descriptors,
// which opens nothing); ok is false when its descriptors cannot be read.
func holds(pid int, shm, db os.FileInfo) (hasShm, hasDB, ok bool) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false, false, false
	}
	for _, fd := range fds {
		fi, err := os.Stat(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue
		}
		hasShm = hasShm || os.SameFile(fi, shm)
		hasDB = hasDB || os.SameFile(fi, db)
	}
	return hasShm, hasDB, true
}

// fileNow is the ledger file this process opened (file, as stat described it then) as it is
// now, wherever it is: stat of one of this process's descriptors of it, which opens nothing
// (closing a descriptor of the file would drop the process's locks on it); nil when there is
// none.
func fileNow(file os.FileInfo) os.FileInfo {
	if file == nil {
		return nil
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	for _, fd := range fds {
		if fi, err := os.Stat(filepath.Join("/proc/self/fd", fd.Name())); err == nil && os.SameFile(fi, file) {
			return fi
		}
	}
	return nil
}

// addLock records that pid locks a file on the device dev.
func addLock(locks map[int]map[string]bool, pid int, dev string) {
	if locks[pid] == nil {
		locks[pid] = map[string]bool{}
	}
	locks[pid][dev] = true
}

// sqliteNameOf names the ledger file real (a resolved path) as process pid opened it: the name
// beside which it has a write-ahead log or its index open (NAME-wal, NAME-shm), if that name
// is not real and either names the same file (a second name) or names none (the file moved
// from it; a log or index removed since counts too), provided it has the file real names open
// itself; "" otherwise, or when this process may not read its descriptors. A name the process
// has another file open by is that file's, not real's: a process that uses two ledgers, one
// of them removed while open (its directory deleted, say), keeps that one's log and index
// open beside a name no file has, and was taken for one using real under that name (a test
// process that kept a ledger whose index was removed refused a child's open of another
// ledger, 2026-12-07).
func sqliteNameOf(pid int, real string) string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	ours, err := os.Stat(real)
	if err != nil {
		return ""
	}
	var (
		candidates []string
		open       bool
		elsewhere  = map[string]bool{} // names of other files the process has open
	)
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil || !strings.HasPrefix(target, "/") {
			continue // gone, or no file (a socket, a pipe)
		}
		fi, statErr := os.Stat(filepath.Join(dir, fd.Name()))
		if statErr == nil && os.SameFile(fi, ours) {
			open = true
		}
		// A log or index removed while open (rm OLD-wal OLD-shm after the move) still holds
		// the process's decisions; the kernel names it "PATH (deleted)".
		if statErr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink == 0 {
				target = strings.TrimSuffix(target, " (deleted)")
			}
			if !os.SameFile(fi, ours) {
				elsewhere[target] = true
			}
		}
		for _, suffix := range []string{"-wal", "-shm"} {
			name, ok := strings.CutSuffix(target, suffix)
			if !ok || name == real {
				continue
			}
			if fi, err := os.Stat(name); errors.Is(err, os.ErrNotExist) || err == nil && os.SameFile(fi, ours) {
				candidates = append(candidates, name)
				break
			}
		}
	}
	if !open {
		return ""
	}
	for _, name := range candidates {
		if !elsewhere[name] {
			return name
		}
	}
	return ""
}
