//go:build linux

package sqlite_test

import (
	"bufio"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// queueHelper is a process writing the ledger at EFFECTFENCE_TEST_LEDGER (see TestMain);
// "procbench" is BenchmarkProcesses's.
// "hold": one Update that prints "holding" and then waits, inside its transaction, until
// stdin ends. "foreign": the same through a plain SQLite connection (no writers' queue).
// "turns": waits for the file EFFECTFENCE_TEST_GO, runs EFFECTFENCE_TEST_N Updates back to
// back, each taking a fencing token, and prints the tokens it got. "write":
// one Update taking a token, then prints "wrote". EFFECTFENCE_TEST_BUSY, when set, is the
// store's busy timeout (a Go duration).
func queueHelper(mode string) error {
	if mode == "procbench" {
		return procBenchHelper()
	}
	if mode == "foreign" {
		// Another SQLite client, not an effectfence store: it holds the ledger's write lock
		// without taking a turn in the writers' queue, until stdin ends.
		return holdForeign(os.Getenv("EFFECTFENCE_TEST_LEDGER"))
	}
	var opt sqlite.Options
	if b := os.Getenv("EFFECTFENCE_TEST_BUSY"); b != "" {
		d, err := time.ParseDuration(b)
		if err != nil {
			return err
		}
		opt.BusyTimeout = d
	}
	st, err := sqlite.Open(ctx, os.Getenv("EFFECTFENCE_TEST_LEDGER"), opt)
	if err != nil {
		return err
	}
	defer st.Close()
	switch mode {
	case "write":
		if err := st.Update(ctx, func(tx fence.Tx) error { _, err := tx.NextToken(); return err }); err != nil {
			return err
		}
		fmt.Println("wrote")
		return nil
	case "hold":
		return st.Update(ctx, func(tx fence.Tx) error {
			if _, err := tx.NextToken(); err != nil {
				return err
			}
			fmt.Println("holding")
			_, err := bufio.NewReader(os.Stdin).ReadString('\n')
			return err
		})
	case "turns":
		n, err := strconv.Atoi(os.Getenv("EFFECTFENCE_TEST_N"))
		if err != nil {
			return err
		}
		fmt.Println("ready")
		for {
			if _, err := os.Stat(os.Getenv("EFFECTFENCE_TEST_GO")); err == nil {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		toks := make([]string, 0, n)
		for range n {
			err := st.Update(ctx, func(tx fence.Tx) error {
				tok, err := tx.NextToken()
				toks = append(toks, strconv.FormatUint(tok, 10))
				return err
			})
			if err != nil {
				return err
			}
		}
		fmt.Println(strings.Join(toks, " "))
		return nil
	}
	return fmt.Errorf("unknown mode %q", mode)
}

func queueProc(t testing.TB, ledger, mode string, env ...string) (*exec.Cmd, *bufio.Scanner, func()) {
	t.Helper()
	cmd, in, out := startSelf(t, append([]string{"EFFECTFENCE_TEST_QUEUE=" + mode, "EFFECTFENCE_TEST_LEDGER=" + ledger}, env...))
	return cmd, out, func() { in.Close() }
}

// tryQueue reports whether the queue's lock is free, taking and releasing it through a
// descriptor of the test's own.
func tryQueue(t *testing.T, ledger string) bool {
	t.Helper()
	f, err := os.OpenFile(ledger+"-lock", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// queueFreeDuring runs an Update (taking a fencing token) and reports whether the queue of
// ledger was free while it ran.
func queueFreeDuring(t *testing.T, st *sqlite.Store, ledger, what string) (free bool) {
	t.Helper()
	if err := st.Update(ctx, func(tx fence.Tx) error {
		free = tryQueue(t, ledger)
		_, err := tx.NextToken()
		return err
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return free
}

// A write transaction holds the queue from before BEGIN to after COMMIT, and only then.
func TestWriterQueueHeldForTheTransaction(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	st := openT(t, ledger, sqlite.Options{})
	if fi, err := os.Stat(ledger + "-lock"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v, %v", fi, err)
	}
	for i := range 3 {
		if queueFreeDuring(t, st, ledger, "update") {
			t.Fatalf("update %d: the queue was free during the transaction", i)
		}
		if !tryQueue(t, ledger) {
			t.Fatalf("update %d: the queue is still held after the transaction", i)
		}
	}
	// A read-only open takes no part in the queue and leaves the file alone: it does not
	// create it (a reader may have no right to write the directory).
	if err := os.Remove(ledger + "-lock"); err != nil {
		t.Fatal(err)
	}
	ro, err := sqlite.Open(ctx, ledger, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.View(ctx, func(tx fence.Tx) error { _, err := tx.Get("nothing"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(ledger + "-lock"); err == nil {
		t.Fatal("a read-only open created the queue's lock file")
	}
}

// Open's migration is a write transaction too (BEGIN IMMEDIATE, on every open for writing):
// it takes its turn like an Update. Without the queue a process starting while others write
// back to back waits in SQLite's busy handler and keeps missing the lock (measured: of 8 opens
// while two processes wrote, the slowest took 1.0-1.9 s; 35-44 ms with the turn). A new
// ledger (an empty file) is the exception: its queue file is made only once its first page is
// on disk (TestEmptiedLedgerIsRefused), so its migration runs with no queue file there yet.
func TestWriterQueueHeldForTheMigration(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	steps, queueFiles := 0, 0
	sqlite.SetTestHookMigrated(func(int) {
		steps++
		if _, err := os.Lstat(ledger + "-lock"); err == nil {
			queueFiles++
		}
	})
	st := openT(t, ledger, sqlite.Options{})
	sqlite.SetTestHookMigrated(nil)
	if steps == 0 || queueFiles != 0 {
		t.Fatalf("a queue file was there during %d of the %d migration steps of a new ledger", queueFiles, steps)
	}
	if _, err := os.Lstat(ledger + "-lock"); err != nil {
		t.Fatalf("no queue file once the new ledger opened: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// An existing ledger of an older schema, its queue file there: migrated in its turn.
	old := copyV1(t)
	if err := os.WriteFile(old+"-lock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	steps, held := 0, 0
	sqlite.SetTestHookMigrated(func(int) {
		steps++
		if !tryQueue(t, old) {
			held++
		}
	})
	defer sqlite.SetTestHookMigrated(nil)
	openT(t, old, sqlite.Options{})
	if steps == 0 || held != steps {
		t.Fatalf("the queue was held during %d of the %d migration steps of an existing ledger", held, steps)
	}
	ledger = old
	if !tryQueue(t, ledger) {
		t.Fatal("the queue is still held after the store opened")
	}
}

// A transaction leaves the queue whatever its outcome: a function that fails or panics, a
// batch that one function makes run again with savepoints, a BEGIN that SQLite refuses. The
// process that holds the queue can always take it again (flock on the same descriptor), so
// only another descriptor sees one that was not let go.
func TestWriterQueueLeftWhateverTheOutcome(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	st := openT(t, ledger, sqlite.Options{BusyTimeout: 200 * time.Millisecond})
	left := func(what string) {
		t.Helper()
		if !tryQueue(t, ledger) {
			t.Fatalf("%s: the queue is still held after the transaction", what)
		}
	}
	failing := errors.New("refused")
	if err := st.Update(ctx, func(tx fence.Tx) error { tx.NextToken(); return failing }); !errors.Is(err, failing) {
		t.Fatalf("failing function: %v", err)
	}
	left("a failing function")
	if err := st.Update(ctx, func(tx fence.Tx) error { tx.NextToken(); panic("boom") }); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("panicking function: %v", err)
	}
	left("a panicking function")

	// Functions that arrive while a transaction runs share the next one; one of them fails,
	// so that batch runs again with savepoints.
	inside, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- st.Update(ctx, func(tx fence.Tx) error { close(inside); <-release; return nil })
	}()
	<-inside
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			errs <- st.Update(ctx, func(tx fence.Tx) error {
				if _, err := tx.NextToken(); err != nil {
					return err
				}
				if i == 2 {
					return failing
				}
				return nil
			})
		}()
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := <-errs; err != nil && !errors.Is(err, failing) {
			t.Fatal(err)
		}
	}
	left("a batch with a failing function")

	// Another client holds SQLite's write lock without queueing (an older build): BEGIN
	// IMMEDIATE fails after the busy timeout.
	db, err := sql.Open("sqlite", ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if err := st.Update(ctx, func(tx fence.Tx) error { _, err := tx.NextToken(); return err }); err == nil {
		t.Fatal("an update ran while another client held the write lock")
	}
	left("a BEGIN that failed")
	if _, err := c.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := st.Update(ctx, func(tx fence.Tx) error { _, err := tx.NextToken(); return err }); err != nil {
		t.Fatal(err)
	}
	left("a transaction after all that")
}

// A queue held past the busy timeout by something that is not writing (here the test, on a
// descriptor of its own) delays a writer by that timeout and no more: SQLite's lock decides,
// and while the flock left waiting is still blocked the next transactions do not wait for
// the queue (TestWriterQueueStuckIsWaitedForOnce). When the queue comes free, that flock
// takes it and lets it go at once, and transactions hold the queue again.
func TestWriterQueueHeldByNobodyWriting(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	st := openT(t, ledger, sqlite.Options{BusyTimeout: time.Second})
	f, err := os.OpenFile(ledger+"-lock", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	update := func(what string) (queueFree bool) {
		t.Helper()
		return queueFreeDuring(t, st, ledger, what)
	}

	for round := range 2 {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		update("with the queue held elsewhere")
		update("with the queue still held elsewhere")
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
			t.Fatal(err)
		}
		// Free, and staying free: the test's own tries may take the queue before the waiting
		// flock does, so one free try does not show that the flock let it go.
		deadline := time.Now().Add(10 * time.Second)
		for free := 0; free < 50; {
			if tryQueue(t, ledger) {
				free++
			} else {
				free = 0
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: a flock left waiting kept the queue", round)
			}
			time.Sleep(2 * time.Millisecond)
		}
		// The waiting flock may still be about to take the queue and let it go; then the
		// transaction goes without it. Once it has, transactions hold the queue again.
		for update("after the queue came free") {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: after a flock was left waiting, transactions no longer hold the queue", round)
			}
			time.Sleep(time.Millisecond)
		}
		if !tryQueue(t, ledger) {
			t.Fatalf("round %d: the queue is still held after the transaction", round)
		}
	}
}

// A process killed (-9) in the middle of a transaction releases the queue with its
// descriptors: the writer waiting behind it goes on.
func TestWriterQueueReleasedByAKilledProcess(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	st := openT(t, ledger, sqlite.Options{})
	cmd, out, _ := queueProc(t, ledger, "hold")
	if !out.Scan() || out.Text() != "holding" {
		t.Fatalf("holder: %q %v", out.Text(), out.Err())
	}
	if tryQueue(t, ledger) {
		t.Fatal("the holder's transaction does not hold the queue")
	}
	done := make(chan error, 1)
	go func() {
		done <- st.Update(ctx, func(tx fence.Tx) error { _, err := tx.NextToken(); return err })
	}()
	select {
	case err := <-done:
		t.Fatalf("an update ran while another process was inside its transaction: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the update still waits after the holder was killed")
	}
}

// A process stopped (SIGSTOP) inside its transaction holds both the queue and SQLite's lock.
// The writers behind it fail with SQLite's busy error after their timeouts instead of
// hanging, and once it is continued and ends its transaction, they write and queue again.
func TestWriterQueueHolderStoppedThenContinued(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	st := openT(t, ledger, sqlite.Options{BusyTimeout: 200 * time.Millisecond})
	cmd, out, release := queueProc(t, ledger, "hold")
	if !out.Scan() || out.Text() != "holding" {
		t.Fatalf("holder: %q %v", out.Text(), out.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		done := make(chan error, 1)
		go func() {
			done <- st.Update(ctx, func(tx fence.Tx) error { _, err := tx.NextToken(); return err })
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "locked") {
				t.Fatalf("update %d while the holder is stopped: %v, want SQLite's busy error", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("update %d still waits for a stopped holder", i)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	release() // the holder's transaction ends (its function fails at the end of its input)
	if err := cmd.Wait(); err == nil {
		t.Fatal("the holder's transaction was meant to fail and roll back")
	}
	// The waiter left behind lets the queue go once it gets it; then turns queue again.
	deadline := time.Now().Add(10 * time.Second)
	for queueFreeDuring(t, st, ledger, "update after the holder ended") {
		if time.Now().After(deadline) {
			t.Fatal("after the stopped holder went on and ended, transactions no longer hold the queue")
		}
		time.Sleep(time.Millisecond)
	}
	if !tryQueue(t, ledger) {
		t.Fatal("the queue stays held after the transaction: the waiter left behind kept it")
	}
}

// Two processes writing back to back take turns. Without the queue, SQLite's busy handler
// let one of them run all its transactions while the other slept.
func TestWriterQueueTakesTurnsAcrossProcesses(t *testing.T) {
	const n = 500
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.db")
	openT(t, ledger, sqlite.Options{}).Close()
	gofile := filepath.Join(dir, "go")
	var outs []*bufio.Scanner
	for range 2 {
		_, out, _ := queueProc(t, ledger, "turns", "EFFECTFENCE_TEST_N="+strconv.Itoa(n), "EFFECTFENCE_TEST_GO="+gofile)
		if !out.Scan() || out.Text() != "ready" {
			t.Fatalf("writer: %q %v", out.Text(), out.Err())
		}
		outs = append(outs, out)
	}
	if err := os.WriteFile(gofile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	type tok struct {
		v    uint64
		proc int
	}
	var all []tok
	for p, out := range outs {
		if !out.Scan() {
			t.Fatalf("writer %d: %v", p, out.Err())
		}
		for _, f := range strings.Fields(out.Text()) {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, tok{v, p})
		}
	}
	if len(all) != 2*n {
		t.Fatalf("%d tokens, want %d", len(all), 2*n)
	}
	slices.SortFunc(all, func(a, b tok) int { return int(a.v) - int(b.v) })
	// Count the hand-overs from one process to the other while both were writing: from the
	// first transaction of the process that started second to the last of the one that
	// finished first. Before and after that window one process runs alone (one may start
	// a little later; at the end the one behind finishes its own), which says nothing about
	// turns. Inside it, how long one process runs in a row depends on how soon the kernel
	// schedules the woken waiter (the holder may take the queue again first: runs of 100 and
	// more were seen, and a tail of 200 when one fell behind), so the test does not bound the
	// longest run; it checks that the turns do alternate. SQLite alone gave no hand-over at
	// all (0 in 16 runs: one process ran all its transactions while the other slept); the
	// queue gave 56-622 with 500 transactions each (40 runs, load 1.2-1.9, where an idle CPU
	// wakes the waiter late and the holder wins more releases) and, with 300 each, 14-308 at
	// load 1.7 and 64-419 at load 3.7-7.5 (-race or not).
	from, to := 0, len(all)-1
	for from < len(all) && all[from].proc == all[0].proc {
		from++
	}
	for to >= 0 && all[to].proc == all[len(all)-1].proc {
		to--
	}
	handovers, longest, run := 0, 0, 0
	for i := from; i <= to; i++ {
		if i > from && all[i].proc == all[i-1].proc {
			run++
		} else {
			run = 1
			if i > from {
				handovers++
			}
		}
		longest = max(longest, run)
	}
	t.Logf("transactions %d-%d of %d ran while both processes wrote: %d hand-overs, longest run %d", from, to, len(all), handovers, longest)
	if handovers < 5 {
		t.Fatalf("the processes took turns %d times while both were writing (transactions %d-%d of %d), want at least 5", handovers, from, to, len(all))
	}
}

// A ledger reached through a symbolic link queues on the lock file beside the file itself,
// as SQLite puts its -wal beside it: two processes using different paths to one ledger take
// turns all the same.
func TestWriterQueueFollowsLinks(t *testing.T) {
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.db")
	openT(t, ledger, sqlite.Options{}).Close()
	link := filepath.Join(t.TempDir(), "via-link.db")
	if err := os.Symlink(ledger, link); err != nil {
		t.Fatal(err)
	}
	st := openT(t, link, sqlite.Options{})
	if queueFreeDuring(t, st, ledger, "update through the link") {
		t.Fatal("a transaction through a link does not hold the ledger's queue")
	}
	if _, err := os.Lstat(link + "-lock"); err == nil {
		t.Fatal("a lock file was made beside the link")
	}
}

// lockFDs counts this process's descriptors of the queue's lock file.
func lockFDs(t *testing.T, ledger string) int {
	t.Helper()
	return fileFDs(t, ledger+"-lock")
}

// fileFDs counts this process's descriptors of the file path.
func fileFDs(t *testing.T, path string) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := filepath.EvalSymlinks(path) // the kernel names the file itself
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if to, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && to == lock {
			n++
		}
	}
	return n
}

// A closed store leaves no descriptor of the lock file behind: the one a turn waited on
// goes with the store when its waiter got the lock in time, and with the waiter when the
// turn gave up on it (the holder stopped), as soon as it gets the lock and lets it go.
func TestWriterQueueClosedStoreLeavesNoDescriptor(t *testing.T) {
	// No collection: an *os.File dropped without Close is closed by its finalizer, which
	// would hide a descriptor left open until the next GC.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	openT(t, ledger, sqlite.Options{}).Close()
	h, err := os.OpenFile(ledger+"-lock", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	hold := func(on bool) {
		t.Helper()
		how := syscall.LOCK_UN
		if on {
			how = syscall.LOCK_EX
		}
		if err := syscall.Flock(int(h.Fd()), how); err != nil {
			t.Fatal(err)
		}
	}
	update := func(st *sqlite.Store) chan error {
		done := make(chan error, 1)
		go func() { done <- st.Update(ctx, func(tx fence.Tx) error { _, err := tx.NextToken(); return err }) }()
		return done
	}
	waitFDs := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for lockFDs(t, ledger) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d descriptors of the lock file, want %d", what, lockFDs(t, ledger), want)
			}
			time.Sleep(time.Millisecond)
		}
	}

	// The waiter gets the lock in time.
	st, err := sqlite.Open(ctx, ledger, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hold(true)
	done := update(st)
	waitFDs(3, "a turn waiting") // the test's, the store's, the waiter's
	hold(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if n := lockFDs(t, ledger); n != 1 {
		t.Fatalf("after a turn that waited and the store's close: %d descriptors of the lock file, want the test's alone", n)
	}

	// The turn gives up on the waiter; the store closes while it still waits.
	if st, err = sqlite.Open(ctx, ledger, sqlite.Options{BusyTimeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	hold(true)
	if err := <-update(st); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if n := lockFDs(t, ledger); n != 2 {
		t.Fatalf("a waiter given up on, its store closed: %d descriptors of the lock file, want 2 (the test's and the waiter's)", n)
	}
	hold(false)
	waitFDs(1, "the waiter of a closed store, after the queue came free")
	if !tryQueue(t, ledger) {
		t.Fatal("the waiter of a closed store keeps the queue")
	}
}

// Two stores of one ledger in one process queue like two processes: flock belongs to an open
// file description, not to the process (POSIX record locks would let the second store's turn
// through at once, and closing any descriptor of the file would drop the first one's). A
// store writing from inside the other's transaction, which can never get SQLite's lock
// there, fails with SQLite's busy error after its timeouts instead of waiting for ever.
func TestWriterQueueTwoStoresInOneProcess(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	a := openT(t, ledger, sqlite.Options{BusyTimeout: 200 * time.Millisecond})
	b := openT(t, ledger, sqlite.Options{})
	if n := lockFDs(t, ledger); n != 2 {
		t.Fatalf("%d descriptors of the lock file for two stores, want 2", n)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // a failure below must not leave the first store's Close waiting
	first := make(chan error, 1)
	go func() {
		first <- a.Update(ctx, func(tx fence.Tx) error { close(inside); <-release; _, err := tx.NextToken(); return err })
	}()
	<-inside
	second := make(chan error, 1)
	go func() { second <- b.Update(ctx, func(tx fence.Tx) error { _, err := tx.NextToken(); return err }) }()
	// The second store's turn waits in flock on a descriptor of its own.
	deadline := time.Now().Add(20 * time.Second)
	for lockFDs(t, ledger) != 3 {
		if time.Now().After(deadline) {
			t.Fatal("the second store does not wait for its turn in the queue while the first one writes")
		}
		time.Sleep(time.Millisecond)
	}
	unblock()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}

	nested := make(chan error, 1)
	go func() {
		nested <- b.Update(ctx, func(tx fence.Tx) error {
			if _, err := tx.NextToken(); err != nil {
				return err
			}
			return a.Update(ctx, func(tx fence.Tx) error { _, err := tx.NextToken(); return err })
		})
	}()
	select {
	case err := <-nested:
		if err == nil || !strings.Contains(err.Error(), "locked") {
			t.Fatalf("a write from inside the other store's transaction: %v, want SQLite's busy error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write from inside the other store's transaction waits for ever")
	}
	deadline = time.Now().Add(20 * time.Second)
	// The first store's waiter left behind lets the queue go; then its turns queue again.
	for queueFreeDuring(t, a, ledger, "the first store afterwards") {
		if time.Now().After(deadline) {
			t.Fatal("after the nested write, the first store's transactions no longer hold the queue")
		}
		time.Sleep(time.Millisecond)
	}
}

// A transaction function that ends its goroutine (runtime.Goexit, which t.FailNow calls) ends
// the leader's transaction on its way out: the queue is left, so another process writes at
// once instead of waiting its whole busy timeout (here 20 s) for its turn, and this store
// goes on writing, on a new connection (database/sql discards the one whose Raw callback did
// not return) that replaces the old one without leaving it open (as an SQLite zombie, kept by
// its statements: a descriptor of the ledger and of its WAL for each Goexit). The store is
// closed only when the test passes: Close would wait for an Update left waiting.
func TestWriterQueueLeftAfterGoexit(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, ledger, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Update(ctx, writeSeq("before")); err != nil {
		t.Fatal(err)
	}
	fds := fileFDs(t, ledger)
	ex := goUpdate(st, exitAfterWrite("exited"))
	ex.ends(t, "the goroutine whose transaction function called runtime.Goexit did not end")
	if !tryQueue(t, ledger) {
		t.Error("the queue is still held after a transaction function called runtime.Goexit")
	}
	start := time.Now()
	_, out, _ := queueProc(t, ledger, "write", "EFFECTFENCE_TEST_BUSY=20s")
	wrote := make(chan string, 1)
	go func() {
		out.Scan()
		wrote <- out.Text()
	}()
	select {
	case line := <-wrote:
		if line != "wrote" {
			t.Fatalf("the other process: %q, want \"wrote\"", line)
		}
		t.Logf("the other process opened the ledger and wrote in %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("another process could not write within 5 s (its busy timeout is 20 s) after a transaction function here called runtime.Goexit: the writers' queue was not left")
	}
	for i := range 3 {
		if i > 0 {
			<-goUpdate(st, exitAfterWrite("exited")).ended
		}
		later := goUpdate(st, writeSeq("later"))
		later.succeeds(t, "an Update after the Goexit did not return")
	}
	if n := fileFDs(t, ledger); n != fds {
		t.Errorf("after three transaction functions called runtime.Goexit: %d descriptors of the ledger, %d before: the discarded writer connections stay open", n, fds)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// A panic on the leader's goroutine outside the transaction functions (here from a test hook
// before COMMIT, as the driver might panic) is not an error of one Update: it goes on up the
// leader's goroutine, with its own value. On its way it ends the batch as a Goexit does: the
// transaction is rolled back, the queue is left, the batch's other callers get an error that
// carries the panic, and the next Update commits.
func TestUpdatePanicOutsideTheFunctions(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, ledger, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	holder := goUpdate(st, func(tx fence.Tx) error {
		close(inside)
		<-release
		return tx.SetDomainSeq("holder", 1)
	})
	<-inside
	const boom = "the driver exploded"
	var commits atomic.Int32
	sqlite.SetTestHookBeforeCommit(func() {
		if commits.Add(1) == 2 { // the holder's batch first, then the one queued behind it
			panic(boom)
		}
	})
	defer sqlite.SetTestHookBeforeCommit(nil)
	leaderPanic := make(chan any, 1)
	go func() {
		defer func() { leaderPanic <- recover() }()
		if err := st.Update(ctx, writeSeq("leader")); err != nil {
			t.Errorf("the leader's Update returned %v, want its panic", err)
		}
	}()
	waitQueued(t, st, 1)
	other := goUpdate(st, writeSeq("other"))
	waitQueued(t, st, 2)
	close(release)
	if err := <-holder.res; err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-leaderPanic:
		if p != boom {
			t.Errorf("the leader's goroutine: recovered %v, want the panic %q", p, boom)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's Update did not come back")
	}
	select {
	case err := <-other.res:
		if err == nil || !strings.Contains(err.Error(), boom) {
			t.Errorf("the other caller of the batch: %v, want an error that carries the panic", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other caller of the batch never got an answer")
	}
	if !tryQueue(t, ledger) {
		t.Error("the queue is still held after the leader panicked")
	}
	later := goUpdate(st, writeSeq("later"))
	later.succeeds(t, "an Update after the panic did not return: the lead was not handed on")
	checkWritten(t, st, map[string]bool{"holder": true, "leader": false, "other": false, "later": true})
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
