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
