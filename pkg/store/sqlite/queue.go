package sqlite

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// writerQueue makes the processes writing one ledger take turns. SQLite's own write lock
// decides who writes; a process that finds it taken waits in SQLite's busy handler, which
// sleeps 1, 2, 5, 10 … up to 100 ms between attempts and takes the lock only if it happens
// to be free at that moment. Two processes deciding calls back to back thus starve each
// other: the one that holds the lock takes it again a few microseconds after each commit,
// and the other, waking every 100 ms, finds it taken (measured: 2.4-3.8 s for one decision
// of the sleeping process, while the other ran hundreds). The normal multi-agent case is
// exactly that: each MCP client starts its own wrap on the same default ledger.
//
// So before BEGIN IMMEDIATE a store's writer takes an exclusive flock(2) on a file beside
// the ledger (<ledger>-lock), and releases it after COMMIT or ROLLBACK. A process that finds
// it held sleeps in the kernel and is woken when it is released, so the writers of different
// processes alternate, each waiting for at most the transactions already queued ahead of it.
// The queue decides nothing: SQLite's lock still does, and a writer that cannot use the queue
// (no lock file, a platform without flock, a queue held past the busy timeout) goes straight
// to BEGIN IMMEDIATE as before. Older builds and other SQLite clients ignore the queue and
// are served by SQLite's busy handler, as before. A process that dies releases its flock with
// its file descriptors.
type writerQueue struct {
	path string
	f    *os.File // opened at Open; nil when the lock file cannot be opened
	// wf is the descriptor waiters block on, kept from turn to turn; nil until a turn first
	// finds the queue taken.
	wf *os.File
	// pending is a waiter that an earlier turn stopped waiting for after a whole limit. While
	// it is still blocked in flock the queue is stuck (its holder stopped inside its turn)
	// and turns do not wait for it; once it has taken the lock and let it go, turns queue
	// again. Nil when there is none.
	pending *queueWaiter
	timer   *time.Timer
}

// openWriterQueue opens the queue of the ledger at path. The lock file sits beside the file
// the path leads to, so that processes reaching one ledger through different links queue
// together (SQLite names its -wal and -shm files the same way).
func openWriterQueue(path string) *writerQueue {
	q := &writerQueue{path: realPath(path) + "-lock"}
	q.f = openQueueFile(q.path)
	return q
}

// openQueueFile opens (creating it 0600 if needed) the queue's lock file, or returns nil. It
// opens only an empty regular file, the queue's own: not a link, and not another ledger that
// happens to be named <ledger>-lock, since closing a descriptor of a file drops every POSIX
// lock this process holds on it, SQLite's included.
func openQueueFile(path string) *os.File {
	if fi, err := os.Lstat(path); err == nil && !ownQueueFile(fi) {
		return nil
	}
	if testHookQueueOpen != nil {
		testHookQueueOpen(path)
	}
	// noFollow: a link put there after the look is not followed either.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|noFollow, 0o600)
	if err != nil {
		return nil
	}
	if fi, err := f.Stat(); err != nil || !ownQueueFile(fi) { // replaced meanwhile
		f.Close()
		return nil
	}
	return f
}

// testHookQueueOpen, when set (by tests only), runs in openQueueFile between its look at the
// path and its open: a test plants another file there meanwhile.
var testHookQueueOpen func(path string)

func ownQueueFile(fi os.FileInfo) bool { return fi.Mode().IsRegular() && fi.Size() == 0 }

// queueFileOf returns the ledger whose queue lock file path (after links) is, or "": path
// ends in -lock, is an empty regular file, and a file is there without the suffix. Opened as
// a ledger, SQLite's POSIX locks on it would be dropped whenever that ledger's store in the
// same process closed its descriptor of the lock file.
func queueFileOf(path string) string {
	path = realPath(path)
	ledger, ok := strings.CutSuffix(path, "-lock")
	if !ok {
		return ""
	}
	if fi, err := os.Stat(path); err != nil || !ownQueueFile(fi) {
		return ""
	}
	if fi, err := os.Stat(ledger); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return ledger
}

// realPath is the file path leads to after its links, or path itself when that cannot be
// told (it does not exist yet).
func realPath(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return path
}

// turn is one writer's place in the queue: enter returns it, leave ends it.
type turn struct {
	f *os.File // the descriptor that holds the lock, or nil when the turn holds nothing
}

// enter takes the queue's lock, waiting at most limit for it, and no longer once stop is
// closed (nil: never). Only Open (for its migration, before the store is returned) and then
// the store's leader call enter, leave and close, so they never overlap. Without contention
// enter is one non-blocking flock. Otherwise a waiter goroutine blocks in flock on a second
// descriptor, so that enter can stop waiting: the turn then holds nothing and the waiter, when
// it gets the lock, lets it go at once.
//
// After a whole limit (the holder stopped inside its turn, most likely), SQLite's busy
// handler takes over, and until the waiter has got the lock the queue is stuck: later turns
// go straight to SQLite's lock, so that such a holder costs this process one limit, not one
// per transaction for as long as it stays stopped. A wait cut by stop (nobody is left to
// write for: every Update of the batch ended its context) says nothing about the holder: the
// next turn waits on in the same waiter, keeping this process's place in the queue.
func (q *writerQueue) enter(limit time.Duration, stop <-chan struct{}) turn {
	if q == nil || q.f == nil {
		return turn{}
	}
	var w *queueWaiter
	if q.pending != nil {
		switch {
		case q.pending.adopt():
			w, q.pending = q.pending, nil
		case !q.pending.hasFinished():
			return turn{}
		default:
			// It got the lock, let it go and closed its descriptor.
			q.pending, q.wf = nil, nil
		}
	}
	if w == nil {
		held, err := flockTry(q.f)
		if held {
			return turn{f: q.f}
		}
		if err != nil { // no flock here, or an error: SQLite's lock alone decides
			return turn{}
		}
		if q.wf == nil {
			if q.wf = openQueueFile(q.path); q.wf == nil {
				return turn{}
			}
		}
		w = &queueWaiter{f: q.wf, done: make(chan struct{})}
		go w.wait()
	}
	if q.timer == nil {
		q.timer = time.NewTimer(limit)
	} else {
		q.timer.Reset(limit)
	}
	select {
	case <-w.done:
		q.timer.Stop()
	case <-q.timer.C:
		if !w.giveUp(false) {
			q.pending = w
			return turn{}
		}
	case <-stop:
		q.timer.Stop()
		if !w.giveUp(true) {
			q.pending = w
			return turn{}
		}
	}
	if w.err != nil {
		return turn{}
	}
	return turn{f: w.f}
}

// queueWaiter is one blocked flock(LOCK_EX).
type queueWaiter struct {
	f    *os.File
	done chan struct{} // closed when flock has returned while a turn waits for it; err is then set
	err  error

	mu        sync.Mutex
	abandoned bool // no turn waits for it: it lets the lock go as soon as it gets it
	finished  bool // it got the lock while abandoned, let it go and closed f
	// stopped: it was abandoned because its turn's callers gave up, not after a whole
	// limit: the next turn may wait on in it (adopt).
	stopped bool
}

func (w *queueWaiter) wait() {
	err := flockWait(w.f)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.abandoned {
		w.finished = true
		w.f.Close() // releases the lock if flock got it
		return
	}
	w.err = err
	close(w.done)
}

// giveUp abandons the waiter, unless flock has returned meanwhile: then it reports true and
// the turn takes what flock gave. stopped says why: the turn's callers gave up (true), or a
// whole limit passed.
func (w *queueWaiter) giveUp(stopped bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return true
	default:
		w.abandoned, w.stopped = true, stopped
		return false
	}
}

// adopt makes a waiter abandoned by stopped callers wait for a turn again, unless it has
// already got the lock and let it go (or was abandoned after a whole limit): it reports
// whether it did.
func (w *queueWaiter) adopt() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped || w.finished {
		return false
	}
	w.abandoned, w.stopped = false, false
	return true
}

// hasFinished reports whether an abandoned waiter has returned from flock, let the lock go
// and closed its descriptor.
func (w *queueWaiter) hasFinished() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.finished
}

// leave ends a turn: the lock goes to the next process in the queue.
func (q *writerQueue) leave(t turn) {
	if t.f != nil {
		flockRelease(t.f)
	}
}

// close releases the queue's descriptors (no turn is in progress: the store has drained). A
// waiter still blocked keeps its descriptor and closes it when flock returns.
func (q *writerQueue) close() {
	if q == nil {
		return
	}
	if q.f != nil {
		q.f.Close()
	}
	if q.wf != nil && q.pending == nil {
		q.wf.Close()
	}
	q.f, q.wf, q.pending = nil, nil, nil
}
