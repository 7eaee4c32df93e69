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

// otherNameWait is how long the evidence that a process uses another name must stay before
// it refuses.
const otherNameWait = 200 * time.Millisecond

// otherNameHolder returns a process that uses the file at path under another name, and that
// name (see checkOtherName), if it still does after wait; 0 and "" when there is none, or
// when this cannot be seen.
func otherNameHolder(path string, wait time.Duration) (int, string) {
	real := realPath(path)
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
	found := look()
	for deadline := time.Now().Add(wait); len(found) > 0 && time.Now().Before(deadline); {
		time.Sleep(wait / 10)
		still := look()
		for pid := range found {
			if _, ok := still[pid]; !ok {
				delete(found, pid)
			}
		}
	}
	for pid, name := range found {
		return pid, name
	}
	return 0, ""
}

// lockersWithout returns the processes other than this one, by pid, that hold a POSIX lock on
// the file db and none on the file shm (shm's zero value: no such file), as far as /proc/locks
// tells. A lock there names its file by inode and by its file system's device, which need not
// be the device stat reports (btrfs reports a subvolume's, /proc/locks the file system's):
// a lock on db is one on its inode on any device, and one on shm is one on shm's inode on the
// same device as that (the two files are in one directory). sqliteNameOf then makes sure the
// process has db itself open.
func lockersWithout(db, shm syscall.Stat_t) map[int]bool {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer f.Close()
	onDB, onShm := map[int]map[string]bool{}, map[int]map[string]bool{}
	self := os.Getpid()
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
		if err != nil || pid <= 0 || pid == self {
			continue
		}
		i := strings.LastIndexByte(fields[5], ':')
		if i < 0 {
			continue
		}
		dev := fields[5][:i]
		ino, err := strconv.ParseUint(fields[5][i+1:], 10, 64)
		if err != nil {
			continue
		}
		switch {
		case ino == uint64(db.Ino):
			addLock(onDB, pid, dev)
		case shm.Ino != 0 && ino == uint64(shm.Ino):
			addLock(onShm, pid, dev)
		}
	}
	if in.Err() != nil {
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
// itself; "" otherwise, or when this process may not read its descriptors.
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
	other, open := "", false
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil || !strings.HasPrefix(target, "/") {
			continue // gone, or no file (a socket, a pipe)
		}
		fi, statErr := os.Stat(filepath.Join(dir, fd.Name()))
		if statErr == nil && os.SameFile(fi, ours) {
			open = true
		}
		if other != "" {
			continue
		}
		// A log or index removed while open (rm OLD-wal OLD-shm after the move) still holds
		// the process's decisions; the kernel names it "PATH (deleted)".
		if statErr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink == 0 {
				target = strings.TrimSuffix(target, " (deleted)")
			}
		}
		for _, suffix := range []string{"-wal", "-shm"} {
			name, ok := strings.CutSuffix(target, suffix)
			if !ok || name == real {
				continue
			}
			if fi, err := os.Stat(name); errors.Is(err, os.ErrNotExist) || err == nil && os.SameFile(fi, ours) {
				other = name
				break
			}
		}
	}
	if !open {
		return ""
	}
	return other
}
