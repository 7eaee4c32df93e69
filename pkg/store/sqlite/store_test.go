package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

var ctx = context.Background()

// The writer must hold the file's write lock from BEGIN, before its first write: otherwise two
// processes could both read "no record" and both admit. This checks what the driver really
// issued: while an Update that has not written anything yet is open, another connection's
// BEGIN IMMEDIATE (with no busy wait) must fail with SQLITE_BUSY, and succeed afterwards.
func TestUpdateBeginsImmediate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	st := openT(t, path, sqlite.Options{})

	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tryWrite := func() error {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		if err == nil {
			_, err = conn.ExecContext(ctx, "ROLLBACK")
		}
		return err
	}

	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.Update(ctx, func(tx fence.Tx) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	err = tryWrite()
	var se *sqlitedrv.Error
	if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
		close(release)
		t.Fatalf("BEGIN IMMEDIATE beside an open Update = %v; want SQLITE_BUSY (the Update did not take the write lock at BEGIN)", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := tryWrite(); err != nil {
		t.Fatalf("BEGIN IMMEDIATE after the Update = %v; want success", err)
	}
}

// Concurrent Updates share transactions; each one's failure (error or panic) must undo its
// own writes only, and every successful one must be durable after reopening.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	errBoom := errors.New("boom")
	var wg sync.WaitGroup
	results := make([]error, n)
	for i := range n {
		wg.Go(func() {
			results[i] = st.Update(ctx, func(tx fence.Tx) error {
				if err := tx.Put(&fence.Record{Intent: fmt.Sprintf("i%03d", i), State: fence.StateInFlight, Tool: "t"}); err != nil {
					return err
				}
				if err := tx.SetDomainSeq(fmt.Sprintf("d%03d", i), uint64(i)); err != nil {
					return err
				}
				switch i % 10 {
				case 3:
					return errBoom
				case 7:
					panic("bad fn")
				}
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range results {
		switch i % 10 {
		case 3:
			if !errors.Is(err, errBoom) {
				t.Errorf("update %d = %v; want its own error", i, err)
			}
		case 7:
			if err == nil || !strings.Contains(err.Error(), "panicked: bad fn") {
				t.Errorf("update %d = %v; want the panic as an error", i, err)
			}
		default:
			if err != nil {
				t.Errorf("update %d = %v", i, err)
			}
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openT(t, path, sqlite.Options{})
	err = st.View(ctx, func(tx fence.Tx) error {
		for i := range n {
			rec, err := tx.Get(fmt.Sprintf("i%03d", i))
			if err != nil {
				return err
			}
			_, found, err := tx.DomainSeq(fmt.Sprintf("d%03d", i))
			if err != nil {
				return err
			}
			want := i%10 != 3 && i%10 != 7
			if (rec != nil) != want || found != want {
				t.Errorf("update %d: record present %v, domain present %v; want %v", i, rec != nil, found, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A caller whose context is cancelled before its turn is not run; the others are.
func TestUpdateCancelledBeforeItsTurn(t *testing.T) {
	st := openT(t, filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{MaxBatch: 4})
	inside, release := make(chan struct{}), make(chan struct{})
	go st.Update(ctx, func(fence.Tx) error { close(inside); <-release; return nil })
	<-inside
	cctx, cancel := context.WithCancel(ctx)
	ran := false
	done := make(chan error, 1)
	go func() {
		done <- st.Update(cctx, func(tx fence.Tx) error { ran = true; return nil })
	}()
	time.Sleep(20 * time.Millisecond) // let it queue behind the open transaction
	cancel()
	close(release)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled update = %v", err)
	}
	if ran {
		t.Fatal("a cancelled update ran")
	}
	if err := st.Update(ctx, func(fence.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestClosedAndReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Update(ctx, func(tx fence.Tx) error {
		return tx.Put(&fence.Record{Intent: "x", State: fence.StateDone, Tool: "t"})
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := st.Update(ctx, func(fence.Tx) error { return nil }); !errors.Is(err, sqlite.ErrClosed) {
		t.Fatalf("update after close = %v", err)
	}
	if err := st.View(ctx, func(fence.Tx) error { return nil }); !errors.Is(err, sqlite.ErrClosed) {
		t.Fatalf("view after close = %v", err)
	}
	ro := openT(t, path, sqlite.Options{ReadOnly: true})
	if err := ro.Update(ctx, func(fence.Tx) error { return nil }); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("update on a read-only store = %v", err)
	}
	err = ro.View(ctx, func(tx fence.Tx) error {
		rec, err := tx.Get("x")
		if err == nil && (rec == nil || rec.State != fence.StateDone) {
			err = fmt.Errorf("read-only view lost the record: %+v", rec)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Tokens keep growing across reopen and are never repeated, also when handed out in batches.
func TestTokensMonotonicAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	var last uint64
	for round := range 3 {
		st, err := sqlite.Open(ctx, path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		seen := map[uint64]bool{}
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				err := st.Update(ctx, func(tx fence.Tx) error {
					tok, err := tx.NextToken()
					if err != nil {
						return err
					}
					mu.Lock()
					defer mu.Unlock()
					if seen[tok] || tok <= last {
						return fmt.Errorf("round %d: token %d repeated or not above %d", round, tok, last)
					}
					seen[tok] = true
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for tok := range seen {
			last = max(last, tok)
		}
		st.Close()
	}
	if last != 150 {
		t.Fatalf("last token %d; want 150", last)
	}
}
