package fence

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// An intent refused as unknown whose outcome waited in the spool, recorded meanwhile by
// another process of the host (its drain held the spool, then this one found nothing left):
// DrainedFor says to ask the ledger again. Before, it counted only what its own drain
// recorded and said no: the duplicate was told the outcome is unknown and an operator must
// decide, for an outcome recorded a moment before (seen with two wraps on one ledger whose
// write lock another process had held).
func TestDrainedForAnOutcomeAnotherProcessRecorded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := New(NewMemoryStore(), Config{SpoolDir: dir})
	o := Outcome{Kind: OutcomeCommit, Ticket: Ticket{Intent: "a", Token: 7}, Result: []byte(`{"ok":true}`)}
	file, err := e.spool.put(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	// The other process's drain holds the spool.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	type res struct {
		drained bool
		err     error
	}
	got := make(chan res, 1)
	go func() {
		d, err := e.DrainedFor(ctx, PriorFailureError{Intent: "a", State: StateUnknown})
		got <- res{d, err}
	}()
	// It saw the outcome waiting and waits for the spool (for up to spoolLockWait: then it
	// drains without the lock, every drained report being a retry).
	select {
	case r := <-got:
		t.Fatalf("DrainedFor returned (%v, %v) while another process's drain held the spool", r.drained, r.err)
	case <-time.After(spoolLockWait / 4):
	}
	// The other process records the outcome and removes its file, then lets the spool go.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if !r.drained || r.err != nil {
			t.Fatalf("DrainedFor = %v, %v after another process recorded the waiting outcome; want true: ask the ledger again", r.drained, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DrainedFor did not return after the spool was let go")
	}
}
