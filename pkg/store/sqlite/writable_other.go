//go:build !unix

package sqlite

import (
	"errors"
	"os"
)

// unwritableBeside returns the write-ahead log or index beside the writable ledger file at
// path that this process cannot open for writing, or "" when there is none (or the file
// itself is not writable). Opening one to write changes nothing in it; on Windows, SQLite's
// locks are the handle's own, and closing another handle keeps them.
func unwritableBeside(path string) string {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return ""
	}
	f.Close()
	for _, side := range []string{path + "-shm", path + "-wal"} {
		f, err := os.OpenFile(side, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
			continue
		}
		if errors.Is(err, os.ErrPermission) {
			return side
		}
	}
	return ""
}
