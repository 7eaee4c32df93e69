package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// holdForeign holds the write lock of the ledger at path through a plain SQLite connection,
// printing "holding", until stdin ends.
func holdForeign(path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	fmt.Println("holding")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_, err = conn.ExecContext(context.Background(), "ROLLBACK")
	return err
}

// holdLedger starts a process holding the ledger's write lock: mode "hold" an effectfence
// store inside its transaction (its turn in the writers' queue taken too), "foreign" another
// SQLite client (no turn). It returns what lets it go.
func holdLedger(t *testing.T, ledger, mode string) (letGo func()) {
	t.Helper()
	_, out, stop := queueProc(t, ledger, mode)
	if !out.Scan() || out.Text() != "holding" {
		t.Fatalf("%s holder: %q, %v", mode, out.Text(), out.Err())
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			stop()
			for out.Scan() { // its output ends when it has exited, the lock given back
			}
		})
	}
}

func goUpdateCtx(ctx context.Context, st *sqlite.Store, fn func(fence.Tx) error) *goCall {
	c := &goCall{res: make(chan error, 1), ended: make(chan struct{})}
	go func() {
		defer close(c.ended)
		c.res <- st.Update(ctx, fn)
	}()
	return c
}

// An Update whose context ends while it waits for the write lock another process holds
// returns its context's error then, not after the busy timeout (up to twice: the writers'
// queue, then SQLite's busy handler), and its function never runs: whether it led (waiting
// for the lock itself) or waited in the queue behind a leader, and whether the other process
// is an effectfence store (its turn in the writers' queue taken) or another SQLite client
// (answered waits 10 s; the store's busy timeout here is a minute).
// The Updates that did not give up still write once the lock is free, and the one that
// waits after a leader gave up still takes its turn in the writers' queue: the wait cut
// short kept this process's place there. serve's 2 s bound on an outcome relies on it
// (docs/serve.md).
func TestUpdateGivesUpWaitingForTheLock(t *testing.T) {
	for _, mode := range []string{"hold", "foreign"} {
		t.Run(mode, func(t *testing.T) {
			ledger := filepath.Join(t.TempDir(), "ledger.db")
			st, err := sqlite.Open(ctx, ledger, sqlite.Options{BusyTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			letGo := holdLedger(t, ledger, mode)
			defer letGo()

			// A leader alone.
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			if err := answered(t, goUpdateCtx(short, st, writeSeq("alone")), "a lone Update"); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a lone Update whose context ended while it waited for the lock: %v, want context.DeadlineExceeded", err)
			}

			// A leader that gives up with an Update behind it that does not: the lead goes
			// on to it, and it waits on.
			leading, cancelLeader := context.WithCancel(ctx)
			defer cancelLeader()
			first := goUpdateCtx(leading, st, writeSeq("first"))
			waitQueued(t, st, 1)
			var queueFree bool
			patient := goUpdate(st, func(tx fence.Tx) error {
				if mode == "hold" {
					queueFree = tryQueue(t, ledger)
				}
				return tx.SetDomainSeq("patient", 1)
			})
			waitQueued(t, st, 2)
			cancelLeader()
			if err := answered(t, first, "a leader with a patient Update behind it"); !errors.Is(err, context.Canceled) {
				t.Fatalf("a leader whose context ended while it waited for the lock: %v, want context.Canceled", err)
			}

			// A queued Update behind that patient leader gives up.
			cctx, cancelQueued := context.WithCancel(ctx)
			queued := goUpdateCtx(cctx, st, writeSeq("queued"))
			waitQueued(t, st, 2)
			cancelQueued()
			if err := answered(t, queued, "an Update queued behind a leader"); !errors.Is(err, context.Canceled) {
				t.Fatalf("an Update cancelled while queued behind a leader: %v, want context.Canceled", err)
			}
			select {
			case err := <-patient.res:
				t.Fatalf("the patient Update returned (%v) while the other process still holds the lock", err)
			default:
			}

			letGo()
			patient.succeeds(t, "the patient Update did not write once the lock was free")
			if mode == "hold" && queueFree {
				t.Error("the Update that waited on after its leader gave up wrote without its turn in the writers' queue")
			}
			checkWritten(t, st, map[string]bool{"alone": false, "first": false, "queued": false, "patient": true})
		})
	}
}
