//go:build !unix

package sqlite

import (
	"errors"
	"os"
)

// Without flock(2) the queue is not used: SQLite's busy handler alone makes writers wait.

const noFollow = 0

var errNoFlock = errors.New("flock is not available on this platform")

func flockTry(*os.File) (bool, error) { return false, errNoFlock }
func flockWait(*os.File) error        { return errNoFlock }
func flockRelease(*os.File)           {}

// waitWritable does nothing here: there is no fsfreeze, and the queue is not used.
func (q *writerQueue) waitWritable() {}
