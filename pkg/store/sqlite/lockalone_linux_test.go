package sqlite

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// lockAlone's look at the index does not hang on a named pipe put in its place (one made after
// the checks for special files beside the ledger): it opened the index blocking, and an open
// of a FIFO with no writer waits for one for ever, holding the registry of this process's
// ledgers (aside) with it.
func TestLockAloneDoesNotHangOnAPipeAsTheIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path+"-shm", 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan bool, 1)
	go func() { done <- lockAlone(f, path) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		// Unblock the open so the goroutine ends with the test.
		if w, err := os.OpenFile(path+"-shm", os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("lockAlone still waits 30 s after it looked at an index that is a named pipe")
	}
}
