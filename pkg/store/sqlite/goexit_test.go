//go:build linux

package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// holdTx runs an Update whose function waits inside its transaction until release is called:
// Updates started meanwhile queue and then run as one batch, led by the first of them.
func holdTx(st *sqlite.Store) (release func(), holder *goCall) {
	inside, rel := make(chan struct{}), make(chan struct{})
	holder = goUpdate(st, func(tx fence.Tx) error {
		close(inside)
		<-rel
		return tx.SetDomainSeq("holder", 1)
	})
	<-inside
	var once sync.Once
	return func() { once.Do(func() { close(rel) }) }, holder
}

// ledgerFDs counts this process's descriptors of the ledger, its WAL, its shared memory and
// the writers' queue's lock file.
func ledgerFDs(t *testing.T, ledger string) [4]int {
	t.Helper()
	return [4]int{fileFDs(t, ledger), fileFDs(t, ledger+"-wal"), fileFDs(t, ledger+"-shm"), fileFDs(t, ledger+"-lock")}
}

// answered waits for the answer of an Update whose goroutine the leader's exit did not end.
func answered(t *testing.T, c *goCall, who string) error {
	t.Helper()
	select {
	case err := <-c.res:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never got an answer", who)
		return nil
	}
}

// A function that ends its goroutine in the batch's second run (each function in its own
// savepoint, after another function of the batch failed) ends that transaction too: nothing
// of the batch is written, every caller still waiting gets the Goexit error (one cancelled
// while queued left the queue at once), the leader's goroutine ends without its Update returning, the writers' queue is left,
// and the store goes on with no descriptor left behind.
func TestUpdateGoexitInTheSavepointRun(t *testing.T) {
	ledger, st := openWritten(t)
	fds := ledgerFDs(t, ledger)
	release, holder := holdTx(st)
	defer release()
	// The first queued leads the next batch: its function fails, so the batch runs again
	// with savepoints, and there the next function exits.
	failing := goUpdate(st, func(tx fence.Tx) error {
		if err := tx.SetDomainSeq("failing", 1); err != nil {
			return err
		}
		return errors.New("refused")
	})
	waitQueued(t, st, 1)
	exiter := goUpdate(st, exitAfterWrite("exited"))
	waitQueued(t, st, 2)
	writer := goUpdate(st, writeSeq("writer"))
	waitQueued(t, st, 3)
	cctx, cancel := context.WithCancel(ctx)
	cancelled := &goCall{res: make(chan error, 1)}
	go func() { cancelled.res <- st.Update(cctx, writeSeq("cancelled")) }()
	waitQueued(t, st, 4)
	cancel()
	// A caller that gives up while its Update waits in the queue leaves it at once: its
	// function never runs.
	if err := answered(t, cancelled, "a cancelled caller"); !errors.Is(err, context.Canceled) {
		t.Errorf("a caller cancelled while queued: %v, want context.Canceled", err)
	}
	release()
	holder.succeeds(t, "the holder's Update did not return")
	failing.ends(t, "the leader's goroutine did not end")
	select {
	case err := <-failing.res:
		t.Fatalf("the leader's Update returned (%v) on a goroutine that runtime.Goexit ended", err)
	default:
	}
	for who, c := range map[string]*goCall{"the caller whose function exited": exiter, "a caller that wrote": writer} {
		if err := answered(t, c, who); err == nil || !strings.Contains(err.Error(), "runtime.Goexit") {
			t.Errorf("%s: %v, want the error that names runtime.Goexit", who, err)
		}
	}
	if !tryQueue(t, ledger) { // the leader's goroutine has ended: its turn is over
		t.Error("the writers' queue is still held after the leader's goroutine ended")
	}
	goUpdate(st, writeSeq("later")).succeeds(t, "an Update after the Goexit did not return")
	checkWritten(t, st, map[string]bool{"before": true, "holder": true, "failing": false, "exited": false, "writer": false, "cancelled": false, "later": true})
	if n := ledgerFDs(t, ledger); n != fds {
		t.Errorf("descriptors of the ledger, WAL, shared memory and queue: %v, %v before", n, fds)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// With group commit off (MaxBatch 1) a function that exits ends a batch of one, and the
// Update queued behind it still leads its own and commits.
func TestUpdateGoexitMaxBatch1(t *testing.T) {
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{BusyTimeout: 5 * time.Second, MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	release, holder := holdTx(st)
	defer release()
	exiter := goUpdate(st, exitAfterWrite("exited"))
	waitQueued(t, st, 1)
	writer := goUpdate(st, writeSeq("writer"))
	waitQueued(t, st, 2)
	release()
	holder.succeeds(t, "the holder's Update did not return")
	exiter.ends(t, "the exiting goroutine did not end")
	writer.succeeds(t, "the Update queued behind a batch of one that exited did not return")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// Close called while Updates are queued behind a batch whose function exits waits for them:
// every one is answered, Close returns, and later calls get ErrClosed.
func TestCloseWhileTheLeaderExits(t *testing.T) {
	for range 5 {
		st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{BusyTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		release, holder := holdTx(st)
		exiter := goUpdate(st, exitAfterWrite("exited"))
		waitQueued(t, st, 1)
		var calls []*goCall
		for i := range 4 {
			calls = append(calls, goUpdate(st, writeSeq(fmt.Sprint(i))))
		}
		waitQueued(t, st, 5)
		closed := make(chan error, 1)
		go func() { closed <- st.Close() }()
		time.Sleep(time.Millisecond)
		release()
		holder.succeeds(t, "the holder's Update did not return")
		<-exiter.ended
		for i, c := range calls {
			if err := answered(t, c, fmt.Sprintf("Update %d", i)); err != nil && !strings.Contains(err.Error(), "runtime.Goexit") {
				t.Errorf("Update %d: %v", i, err)
			}
		}
		returnsNil(t, closed, "Close did not return")
		if err := st.Update(ctx, writeSeq("late")); !errors.Is(err, sqlite.ErrClosed) {
			t.Fatalf("Update after Close: %v", err)
		}
	}
}

// Under load (run it with -race), functions that exit, in Updates and in Views, and
// functions that panic and then exit from a deferred call, mix with Updates and Views that
// return: every Update that returns nil is written, every other one names runtime.Goexit,
// and no descriptor is left behind by the discarded connections.
func TestGoexitsUnderLoad(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, ledger, sqlite.Options{BusyTimeout: 5 * time.Second, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	committed := map[string]bool{}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				d := fmt.Sprintf("d%d-%d", g, i)
				switch rand.IntN(6) {
				case 0:
					<-goUpdate(st, exitAfterWrite(d)).ended
				case 1:
					<-goUpdate(st, func(tx fence.Tx) error {
						if err := tx.SetDomainSeq(d, 1); err != nil {
							return err
						}
						defer runtime.Goexit()
						panic("then exits")
					}).ended
				case 2:
					ended := make(chan struct{})
					go func() {
						defer close(ended)
						st.View(ctx, func(tx fence.Tx) error {
							tx.DomainSeq(d)
							runtime.Goexit()
							return nil
						})
					}()
					<-ended
				case 3:
					if err := st.View(ctx, func(tx fence.Tx) error { _, _, err := tx.DomainSeq(d); return err }); err != nil {
						t.Errorf("View: %v", err)
					}
				default:
					err := st.Update(ctx, writeSeq(d))
					switch {
					case err == nil:
						mu.Lock()
						committed[d] = true
						mu.Unlock()
					case !strings.Contains(err.Error(), "runtime.Goexit"):
						t.Errorf("Update: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	err = st.View(ctx, func(tx fence.Tx) error {
		for g := range 6 {
			for i := range 40 {
				d := fmt.Sprintf("d%d-%d", g, i)
				if _, found, err := tx.DomainSeq(d); err != nil {
					return err
				} else if found != committed[d] {
					t.Errorf("domain %s: written %v, its Update returned nil: %v", d, found, committed[d])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// One writer and at most four readers (the pool's size) may be open, each with its
	// descriptors of the ledger and the WAL; the shared memory and the queue's two are the
	// store's. A connection left open after each exit would pass these bounds many times.
	if n := ledgerFDs(t, ledger); n[0] > 5 || n[1] > 5 || n[2] > 1 || n[3] > 2 {
		t.Errorf("descriptors of the ledger, WAL, shared memory and queue: %v, at most [5 5 1 2] expected", n)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
