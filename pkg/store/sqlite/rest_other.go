//go:build !linux

package sqlite

import "os"

// restingReader is a Linux look (open file description locks, see rest_linux.go): elsewhere
// no ledger is taken to be at rest, and Check reads it as a process using it does.
func restingReader(string) *os.File { return nil }

// stillAtRest is never asked elsewhere (restingReader returns no file).
func stillAtRest(*os.File, string) bool { return false }

// lockAlone is a Linux look too: elsewhere no ledger is taken to be at rest.
func lockAlone(*os.File, string) bool { return false }
