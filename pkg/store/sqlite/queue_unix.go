//go:build unix

package sqlite

import (
	"errors"
	"os"
	"syscall"
)

// noFollow makes opening the queue's lock file fail on a link.
const noFollow = syscall.O_NOFOLLOW

// flockTry takes the exclusive lock on f if it is free. It reports held=false with a nil
// error when another descriptor holds it, and an error when flock cannot be used here.
func flockTry(f *os.File) (held bool, err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			return false, err
		}
	}
}

// flockWait blocks until the exclusive lock on f is taken.
func flockWait(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func flockRelease(f *os.File) {
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// waitWritable returns once the file system of the queue's lock file (the ledger's: they sit
// side by side) takes writes: while it is frozen (fsfreeze, as backup and snapshot tools do)
// a write of no bytes waits in the kernel like any other write, and changes nothing. A
// transaction's first write to a frozen ledger is otherwise a store into SQLite's
// shared-memory index (its -shm file, mapped into memory), which waits in a page fault: in
// what is, to Go's scheduler, running Go code, that cannot be preempted, so the first
// stop-the-world (a garbage collection) waits for the thaw with it, and the whole process
// stops (TestClaimOnAFrozenDiskIsAnswered). Waiting in a system call instead, the writer
// holds nothing the runtime needs. A read transaction's first store is its read mark, into
// the same index: Views wait here too (TestDuplicateOnAFrozenDiskIsAnswered). A freeze that
// begins after this returns, while the transaction runs, is not covered. Nothing is done
// without a lock file (a store opened read-only).
func (q *writerQueue) waitWritable() {
	if q == nil || q.f == nil {
		return
	}
	rc, err := q.f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		for {
			// os.File.WriteAt makes no system call for no bytes.
			if _, err := syscall.Pwrite(int(fd), nil, 0); !errors.Is(err, syscall.EINTR) {
				return
			}
		}
	})
}
