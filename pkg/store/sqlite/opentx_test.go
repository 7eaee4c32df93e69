package sqlite_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestCancelledViewsLeaveNoTransactionOpen: Views whose context ends at any moment, BEGIN
// included, leave no reader connection in an open transaction. The driver answers a BEGIN
// that ran with the context's error when the context ended meanwhile; the View used to return
// without ending the transaction, and every later View on that connection failed with
// "cannot start a transaction within a transaction" (about 3 % of the Views here, and every
// View with a live context afterwards on the connections so left), while the transaction kept
// the write-ahead log from being checkpointed.
func TestCancelledViewsLeaveNoTransactionOpen(t *testing.T) {
	t.Parallel()
	st := openEmpty(t)
	// The contexts end at random moments over about two Views' time, so that some end while
	// BEGIN runs, however fast this build is (-race is several times slower).
	start := time.Now()
	for range 200 {
		if err := st.View(context.Background(), func(tx fence.Tx) error { _, err := tx.Get("x"); return err }); err != nil {
			t.Fatal(err)
		}
	}
	span := 2 * time.Since(start) / 200
	var wg sync.WaitGroup
	var bad, views atomic.Int64
	var first atomic.Value
	deadline := time.Now().Add(3 * time.Second)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithCancel(context.Background())
				d := time.Duration(rng.Int64N(int64(span) + 1))
				go func() { time.Sleep(d); cancel() }()
				err := st.View(ctx, func(tx fence.Tx) error {
					_, err := tx.Get("x")
					return err
				})
				views.Add(1)
				if err != nil && strings.Contains(err.Error(), "within a transaction") {
					bad.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	// Then Views with live contexts, enough to use every reader connection: all succeed.
	live := 0
	for range 64 {
		if err := st.View(context.Background(), func(tx fence.Tx) error { _, err := tx.Get("x"); return err }); err != nil {
			t.Errorf("a View with a live context after the cancelled ones: %v", err)
			break
		}
		live++
	}
	if bad.Load() > 0 {
		t.Fatalf("%d of %d cancelled Views failed as %q", bad.Load(), views.Load(), first.Load())
	}
	t.Logf("%d cancelled Views, then %d live ones", views.Load(), live)
}

// TestWriterHealsATransactionLeftOpen: a transaction left open on the writer's connection (by
// a batch whose ROLLBACK failed) is ended by the next batch, which commits; before, every later
// Update failed with "cannot start a transaction within a transaction".
func TestWriterHealsATransactionLeftOpen(t *testing.T) {
	t.Parallel()
	st := openEmpty(t)
	if err := st.LeaveWriterInTransaction(); err != nil {
		t.Fatal(err)
	}
	e := fence.New(st, fence.Config{})
	adm, err := e.Prepare(context.Background(), fence.Request{Intent: "after", Tool: "t", Args: []byte(`{}`)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("a claim after a transaction was left open: %+v %v", adm, err)
	}
	if _, err := e.Commit(context.Background(), *adm.Ticket, []byte(`{"ok":1}`)); err != nil {
		t.Fatalf("its commit: %v", err)
	}
}

// openEmpty opens a new ledger in a temporary directory, closed when the test ends.
func openEmpty(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
