//go:build linux

package sqlite_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A store opens new connections to its file long after Open: the writer after a transaction
// function ended the leader's goroutine (database/sql discarded its connection), a reader
// whenever more Views run at once than the pool has connections yet. When the ledger was
// removed meanwhile, such a connection must fail, not create a new empty ledger in its place:
// SQLite would create it with its default mode (0644 under the usual umask), readable by
// every user, and the next process opening the path would take it for a new ledger and record
// its decisions there, world-readable. The calls fail with an error; once the ledger is back,
// the next Update takes a connection again and commits; Close still works.
func TestRemovedLedgerIsNotCreatedAgain(t *testing.T) {
	ledger, st := openWritten(t)
	// A copy, to put back at the end.
	saved := t.TempDir()
	for _, f := range []string{ledger, ledger + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(saved, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	absent := func(after string) {
		t.Helper()
		if fi, err := os.Stat(ledger); err == nil {
			t.Errorf("after %s, a file (mode %v, %d bytes) is at the removed ledger's path", after, fi.Mode().Perm(), fi.Size())
			os.Remove(ledger)
		}
	}

	// The writer: the leader's goroutine ends inside its transaction, the next batch takes a
	// new connection. (Were the ledger gone first, that batch would be refused before its
	// function ran: the store writes nothing while its path does not name its file.)
	goUpdate(st, exitAfterWrite("exited")).ends(t, "the goroutine whose transaction function called runtime.Goexit did not end")
	for _, f := range []string{ledger, ledger + "-wal", ledger + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	later := goUpdate(st, writeSeq("later"))
	select {
	case err := <-later.res:
		if err == nil {
			t.Error("an Update on a new writer connection to the removed ledger returned nil")
		}
		t.Logf("the Update after the ledger was removed: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("an Update after the Goexit did not return")
	}
	absent("an Update on a new writer connection")

	// The readers: one View holds the pool's connection, a second needs a new one.
	inside, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- st.View(ctx, func(fence.Tx) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	err := st.View(ctx, func(tx fence.Tx) error {
		_, _, err := tx.DomainSeq("before")
		return err
	})
	close(release)
	if err == nil {
		t.Error("a View on a new reader connection to the removed ledger returned nil")
	}
	t.Logf("the View on a new reader connection: %v", err)
	if err := <-first; err != nil {
		t.Errorf("the View on the reader connection opened before the removal: %v", err)
	}
	absent("a View on a new reader connection")

	// The writer tries again at the next batch: with the ledger back, an Update commits.
	for _, f := range []string{ledger, ledger + "-wal"} {
		if err := os.Rename(filepath.Join(saved, filepath.Base(f)), f); err != nil {
			t.Fatal(err)
		}
	}
	goUpdate(st, writeSeq("back")).succeeds(t, "an Update after the ledger was put back did not return")

	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// When the writer cannot take a new connection (here the ledger was moved away after a
// transaction function ended the leader's goroutine, and database/sql discarded the old
// connection), every caller of the next batch gets the error, the writers' queue is left, and
// the next Update tries again: with the ledger back, it commits, and Close returns.
func TestWriterCannotReconnect(t *testing.T) {
	ledger, st := openWritten(t)
	// The Updates queued behind a transaction whose function ends its goroutine run together
	// in the next batch, which needs a new connection.
	inside, release := make(chan struct{}), make(chan struct{})
	exiter := goUpdate(st, func(tx fence.Tx) error {
		close(inside)
		<-release
		if err := tx.SetDomainSeq("exited", 1); err != nil {
			return err
		}
		runtime.Goexit()
		return nil
	})
	<-inside
	var calls []*goCall
	for i, d := range []string{"a", "b", "c"} {
		calls = append(calls, goUpdate(st, writeSeq(d)))
		waitQueued(t, st, i+1)
	}
	away := ledger + ".away"
	if err := os.Rename(ledger, away); err != nil {
		t.Fatal(err)
	}
	close(release)
	exiter.ends(t, "the goroutine whose transaction function called runtime.Goexit did not end")
	for i, c := range calls {
		select {
		case err := <-c.res:
			if err == nil {
				t.Errorf("Update %d of the batch returned nil with the ledger moved away", i)
			} else if i == 0 {
				t.Logf("the batch that could not take a writer connection: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Update %d of the batch never got an answer when the writer could not take a new connection", i)
		}
	}
	if !tryQueue(t, ledger) {
		t.Error("the writers' queue is still held after the writer could not take a new connection")
	}
	if err := os.Rename(away, ledger); err != nil {
		t.Fatal(err)
	}
	goUpdate(st, writeSeq("after")).succeeds(t, "an Update after the ledger was back did not return")
	checkWritten(t, st, map[string]bool{"before": true, "exited": false, "a": false, "b": false, "c": false, "after": true})
	closed := make(chan error, 1)
	go func() { closed <- st.Close() }()
	returnsNil(t, closed, "Close did not return")
}
