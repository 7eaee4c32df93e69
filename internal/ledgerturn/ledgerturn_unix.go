//go:build unix

// Package ledgerturn stops a process that uses a SQLite ledger at a moment it holds no turn
// of it, for the tests whose adversary is a process stopped mid-call.
package ledgerturn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// StopOutsideTurn stops process pid (SIGSTOP) at a moment it holds no turn of the SQLite
// ledger at path: neither SQLite's write lock nor the writers' queue beside the file.
//
// A test that stops a claim's holder to see what the others make of a silent holder means a
// holder stopped inside its call, as a user's would be. Stopped at an arbitrary instant, the
// process may instead be inside one of its own write transactions (a background sweep, a
// recovery tick, a counter); then every other process waits for the ledger (SQLITE_BUSY after
// the busy timeout), which is the documented cost of a process stopped inside its turn
// (docs/DECISIONS-sqlite.md), not the case such a test is about. So: stop, look, and if the
// process holds a turn, let it run a little and stop it again. It returns how many stops it
// took, or an error once 200 have all found a turn held.
func StopOutsideTurn(pid int, ledger string) (stops int, err error) {
	for stops = 1; ; stops++ {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return stops, err
		}
		stopped(pid)
		held, err := TurnHeld(ledger)
		if err != nil {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			return stops, err
		}
		if !held {
			return stops, nil
		}
		if stops == 200 {
			return stops, fmt.Errorf("process %d held a turn of ledger %s each of %d times it was stopped", pid, ledger, stops)
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return stops, err
		}
		time.Sleep(time.Duration(1+stops%7) * time.Millisecond)
	}
}

// stopped waits until every thread of pid is stopped (a signal is delivered after kill
// returns, and a thread still running could take the lock after the look), for at most 10
// seconds (a thread waiting for a core on a loaded machine stops only once it runs). Where
// there is no /proc it waits 50 ms.
func stopped(pid int) {
	tasks := fmt.Sprintf("/proc/%d/task", pid)
	if _, err := os.Stat(tasks); err != nil {
		time.Sleep(50 * time.Millisecond)
		return
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		ents, err := os.ReadDir(tasks)
		if err != nil {
			return // gone
		}
		all := true
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(tasks, e.Name(), "stat"))
			if err != nil {
				continue // an exited thread
			}
			i := strings.LastIndexByte(string(b), ')')
			if f := strings.Fields(string(b[i+1:])); len(f) > 0 && f[0] != "T" && f[0] != "t" && f[0] != "Z" && f[0] != "X" {
				all = false
				break
			}
		}
		if all {
			return
		}
	}
}

// TurnHeld says whether another process holds SQLite's write lock of the ledger (a write lock
// on byte 120 of its -shm file, WAL_WRITE_LOCK) or its writers' queue (an flock of its -lock
// file). A file that does not exist holds nothing.
func TurnHeld(ledger string) (bool, error) {
	if f, err := os.OpenFile(ledger+"-shm", os.O_RDWR, 0); err == nil {
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 120, Len: 1}
		err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk)
		f.Close()
		if err != nil {
			return false, err
		}
		if lk.Type != syscall.F_UNLCK {
			return true, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	f, err := os.OpenFile(ledger+"-lock", os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return true, nil
		}
		return false, err
	}
	return false, syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
