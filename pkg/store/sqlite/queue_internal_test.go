//go:build linux

package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A queue held past one turn's limit is stuck (its holder stopped inside its turn: SIGSTOP,
// a debugger, a frozen container): the turns after it do not wait for it again while the
// flock left waiting is still blocked, or every transaction of this process would pay the
// whole busy timeout for as long as the holder stays stopped. Once the holder lets go, that
// flock takes the queue and lets it go at once, and turns queue again.
func TestWriterQueueStuckIsWaitedForOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	q := openWriterQueue(path)
	defer q.close()
	if q.f == nil {
		t.Fatal("no lock file")
	}
	holder, err := os.OpenFile(path+"-lock", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	if tr := q.enter(10*time.Millisecond, nil); tr.f != nil {
		t.Fatal("a turn holds the queue that another descriptor holds")
	}
	// The next turns must not wait: a limit of an hour stands for "forever".
	for i := range 3 {
		entered := make(chan turn, 1)
		go func() { entered <- q.enter(time.Hour, nil) }()
		select {
		case tr := <-entered:
			if tr.f != nil {
				t.Fatalf("turn %d holds the queue that another descriptor holds", i)
			}
			q.leave(tr)
		case <-time.After(20 * time.Second):
			t.Fatalf("turn %d waits again for a queue that stayed held past a whole limit", i)
		}
	}

	// The holder lets go: the flock left waiting takes the queue and lets it go, and a turn
	// holds the queue again.
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		tr := q.enter(time.Hour, nil)
		if tr.f != nil {
			err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				t.Fatalf("a turn holds the queue, yet another descriptor could take it: %v", err)
			}
			q.leave(tr)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("turns no longer hold the queue after it came free")
		}
		time.Sleep(time.Millisecond)
	}
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("the queue is held after the turn left: %v", err)
	}
}

// The queue opens only a lock file of its own: an empty regular file. Another ledger named
// like it (<ledger>-lock is a fine name for a ledger) is left alone, because closing any
// descriptor of a file drops the POSIX locks SQLite holds on it in this process; and a link
// there is not followed.
func TestWriterQueueOpensOnlyItsOwnFile(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.db")
	if err := os.WriteFile(other, []byte("SQLite format 3\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, plant := range map[string]func(lock string) error{
		"a non-empty file": func(lock string) error { return os.WriteFile(lock, []byte("SQLite format 3\x00"), 0o600) },
		"a link":           func(lock string) error { return os.Symlink(other, lock) },
		"a dangling link":  func(lock string) error { return os.Symlink(filepath.Join(dir, "nowhere"), lock) },
		"a directory":      func(lock string) error { return os.Mkdir(lock, 0o700) },
	} {
		path := filepath.Join(dir, name+".db")
		if err := plant(path + "-lock"); err != nil {
			t.Fatal(err)
		}
		q := openWriterQueue(path)
		if q.f != nil {
			t.Errorf("%s at %s-lock: the queue opened it", name, path)
		}
		if tr := q.enter(time.Second, nil); tr.f != nil {
			t.Errorf("%s at %s-lock: a turn holds it", name, path)
		}
		q.close()
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); err == nil {
		t.Error("the queue created the file a dangling link leads to")
	}
	// Its own file, empty, is opened again by the next store.
	path := filepath.Join(dir, "ledger.db")
	for range 2 {
		q := openWriterQueue(path)
		if q.f == nil {
			t.Fatal("the queue did not open its own lock file")
		}
		q.close()
	}
}

// A link put at <ledger>-lock after the queue looked at the path and before it opened it is
// not followed either: the queue would create the file a dangling link names, and would
// take an empty file elsewhere for its own.
func TestWriterQueueOpensNoLinkPlantedMeanwhile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	nowhere := filepath.Join(dir, "nowhere")
	defer func() { testHookQueueOpen = nil }()
	for name, target := range map[string]string{"a dangling link": nowhere, "a link to an empty file": empty} {
		testHookQueueOpen = func(path string) {
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, name+".db-lock")
		if f := openQueueFile(path); f != nil {
			f.Close()
			t.Errorf("%s put at %s meanwhile: the queue opened it", name, path)
		}
	}
	if _, err := os.Lstat(nowhere); err == nil {
		t.Error("the queue created the file a dangling link put there meanwhile leads to")
	}
}
