//go:build unix

package sqlite

import (
	"fmt"
	"os"
	"syscall"
)

// checkOneName refuses a ledger file with more than one name (hard links: ln FILE OTHER, or a
// backup made with cp -al). SQLite keeps a ledger's write-ahead log and its index beside the
// name it opens (NAME-wal, NAME-shm), so processes that use one file under two names write
// two logs: each misses the decisions committed in the other's log, answers their duplicates
// as new calls and runs them again, and the two logs' checkpoints overwrite each other's pages
// in the one file. A symbolic link is no such name: SQLite follows it to the file.
func checkOneName(path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Nlink <= 1 {
		return nil
	}
	return &FileError{Path: path,
		Problem: fmt.Sprintf("has %d names (hard links to one file): SQLite keeps the ledger's write-ahead log beside the name it opens (NAME-wal), so processes using the file under different names would write separate logs, each missing the decisions in the other's and running their duplicates again", st.Nlink),
		Advice:  fmt.Sprintf("stop every effectfence process that uses the file and give it one name: remove its other names (find / -xdev -samefile %s lists them), but if one of them has a write-ahead log beside it that is not empty (NAME-wal), that name holds decisions this one lacks: keep it and remove the others; where a second name is needed, use a symbolic link (SQLite follows it to the file); nothing was changed", path)}
}

// fileID is the device and inode stat reports for fi.
func fileID(fi os.FileInfo) (dev, ino uint64, ok bool) {
	if fi == nil {
		return 0, 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true
}
