package sqlite_test

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// goCall is an Update running in a goroutine of its own: res receives what Update returned,
// and ended is closed when the goroutine ends, whether Update returned or not.
type goCall struct {
	res   chan error
	ended chan struct{}
}

func goUpdate(st *sqlite.Store, fn func(fence.Tx) error) *goCall {
	c := &goCall{res: make(chan error, 1), ended: make(chan struct{})}
	go func() {
		defer close(c.ended)
		c.res <- st.Update(ctx, fn)
	}()
	return c
}

// writeSeq sets the sequence of the domain name: a write the test can look for afterwards.
// succeeds waits up to 10 s for the call to return, and fails the test if it returned an
// error or, saying late, if it has not returned by then.
func (c *goCall) succeeds(t *testing.T, late string) {
	t.Helper()
	returnsNil(t, c.res, late)
}

// ends waits up to 10 s for the call's goroutine to end, and fails the test, saying late, if
// it has not by then.
func (c *goCall) ends(t *testing.T, late string) {
	t.Helper()
	select {
	case <-c.ended:
	case <-time.After(10 * time.Second):
		t.Fatal(late)
	}
}

// returnsNil waits up to 10 s for an error on ch, and fails the test if it is not nil or,
// saying late, if none came by then.
func returnsNil(t *testing.T, ch <-chan error, late string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(late)
	}
}

// openWritten opens a new ledger (busy timeout 5 s) and writes the domain "before" in it.
func openWritten(t *testing.T) (string, *sqlite.Store) {
	t.Helper()
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, ledger, sqlite.Options{BusyTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Update(ctx, writeSeq("before")); err != nil {
		t.Fatal(err)
	}
	return ledger, st
}

// checkWritten fails the test unless exactly the domains want marks true were written (by
// writeSeq) in st.
func checkWritten(t *testing.T, st *sqlite.Store, want map[string]bool) {
	t.Helper()
	err := st.View(ctx, func(tx fence.Tx) error {
		for d, w := range want {
			if _, found, err := tx.DomainSeq(d); err != nil {
				return err
			} else if found != w {
				t.Errorf("domain %s: written %v, want %v", d, found, w)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func writeSeq(name string) func(fence.Tx) error {
	return func(tx fence.Tx) error { return tx.SetDomainSeq(name, 1) }
}

// exitAfterWrite writes like writeSeq, then ends its goroutine (as t.FailNow does).
func exitAfterWrite(name string) func(fence.Tx) error {
	return func(tx fence.Tx) error {
		if err := tx.SetDomainSeq(name, 1); err != nil {
			return err
		}
		runtime.Goexit()
		return nil
	}
}

// waitQueued waits until n Updates wait in st's queue.
func waitQueued(t *testing.T, st *sqlite.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st.Queued() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d Updates queued, want %d", st.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A transaction function that calls runtime.Goexit ends the goroutine it runs on, the batch's
// leader, which is its own caller's or another caller's (the leader runs every function of its
// batch): that goroutine cannot be saved, and its Update never returns. Everything else can:
// the batch's transaction is rolled back, every other caller in it gets an error that says
// why (or its committed result), the lead goes on, and the next Update commits. Before the
// fix the other callers and every later Update waited for ever; the test fails after a
// timeout instead (and leaves the store open: closing it would wait for them too).
func TestUpdateGoexitInABatch(t *testing.T) {
	for _, exiterLeads := range []bool{true, false} {
		name := "the leader's own function exits"
		if !exiterLeads {
			name = "another caller's function exits on the leader's goroutine"
		}
		t.Run(name, func(t *testing.T) {
			st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{BusyTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			// A transaction held open, so that the Updates below queue behind it and run
			// together in the next one, led by the first of them.
			inside, release := make(chan struct{}), make(chan struct{})
			holder := goUpdate(st, func(tx fence.Tx) error {
				close(inside)
				<-release
				return tx.SetDomainSeq("holder", 1)
			})
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			<-inside
			var lead *goCall
			queued := 0
			if !exiterLeads {
				lead = goUpdate(st, writeSeq("lead"))
				queued++
				waitQueued(t, st, queued)
			}
			exiter := goUpdate(st, exitAfterWrite("exited"))
			queued++
			waitQueued(t, st, queued)
			others := []string{"other-1", "other-2", "other-3"}
			calls := make([]*goCall, len(others))
			for i, o := range others {
				calls[i] = goUpdate(st, writeSeq(o))
			}
			queued += len(others)
			waitQueued(t, st, queued)
			close(release)
			holder.succeeds(t, "the holder's Update did not return")

			ended := func(c *goCall, who string) {
				t.Helper()
				c.ends(t, who+": the goroutine did not end")
				select {
				case err := <-c.res:
					t.Fatalf("%s: Update returned (%v) on a goroutine that runtime.Goexit ended", who, err)
				default:
				}
			}
			if exiterLeads {
				ended(exiter, "the caller whose function called runtime.Goexit, the leader")
			} else {
				ended(lead, "the leader, which ran the other caller's function")
				// The caller whose function exited was waiting on a goroutine of its own.
				select {
				case err := <-exiter.res:
					if err == nil || !strings.Contains(err.Error(), "runtime.Goexit") {
						t.Errorf("the caller whose function called runtime.Goexit on the leader's goroutine: %v, want an error that names runtime.Goexit", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the caller whose function called runtime.Goexit on the leader's goroutine never got an answer")
				}
			}
			committed := map[string]bool{}
			for i, c := range calls {
				select {
				case err := <-c.res:
					switch {
					case err == nil:
						committed[others[i]] = true
					case !strings.Contains(err.Error(), "runtime.Goexit"):
						t.Errorf("%s: %v, want an error that names runtime.Goexit", others[i], err)
					default:
						t.Logf("%s: %v", others[i], err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s shared a batch with a function that called runtime.Goexit and never got an answer", others[i])
				}
			}
			later := goUpdate(st, writeSeq("later"))
			select {
			case err := <-later.res:
				if err != nil {
					t.Fatalf("an Update after the Goexit: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("an Update after the Goexit did not return: the lead was not handed on")
			}
			committed["holder"], committed["later"] = true, true
			err = st.View(ctx, func(tx fence.Tx) error {
				for _, d := range append(others, "holder", "later", "lead", "exited") {
					_, found, err := tx.DomainSeq(d)
					if err != nil {
						return err
					}
					if found != committed[d] {
						t.Errorf("domain %s: written %v, want %v", d, found, committed[d])
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
