//go:build unix

package sqlite

import (
	"errors"

	"golang.org/x/sys/unix"
)

// unwritableBeside returns the write-ahead log or index beside the writable ledger file at
// path that this process may not write, or "" when there is none (or the file itself is not
// writable). It asks the kernel (access(2)) and opens nothing: it runs on an error of an open
// Store, and closing a descriptor of the ledger or its index drops every POSIX lock this
// process holds on them, SQLite's included (here.go). Before 2026-12-07 it opened and closed
// each of them to try (TestUnwritableBesideKeepsTheLocks).
func unwritableBeside(path string) string {
	if unix.Access(path, unix.W_OK) != nil {
		return ""
	}
	for _, side := range []string{path + "-shm", path + "-wal"} {
		err := unix.Access(side, unix.W_OK)
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return side
		}
	}
	return ""
}
