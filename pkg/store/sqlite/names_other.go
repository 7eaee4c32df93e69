//go:build !unix

package sqlite

import "os"

// checkOneName is a Unix check (see names_unix.go): elsewhere nothing is refused.
func checkOneName(string, os.FileInfo) error { return nil }

// fileID is a Unix look: elsewhere a file's identity is not read (see fileStamp).
func fileID(os.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }
