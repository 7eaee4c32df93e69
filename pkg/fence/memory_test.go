package fence_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

func TestMemoryStoreContract(t *testing.T) {
	t.Parallel()
	fencetest.Run(t, func(t *testing.T) fence.Store {
		st := fence.NewMemoryStore()
		t.Cleanup(func() { st.Close() })
		return st
	})
}

// TestMemoryStoreContractOpaque runs the contract with the memory store hidden behind
// another type, so that the engine takes the path every other store takes (it runs its
// passes on the stack only for a *MemoryStore it recognises).
func TestMemoryStoreContractOpaque(t *testing.T) {
	t.Parallel()
	fencetest.Run(t, func(t *testing.T) fence.Store {
		st := fence.NewMemoryStore()
		t.Cleanup(func() { st.Close() })
		return opaqueStore{st}
	})
}

type opaqueStore struct{ fence.Store }

// TestMemoryStoreViewRefusesWrites: every write in a read transaction fails and changes
// nothing.
func TestMemoryStoreViewRefusesWrites(t *testing.T) {
	ctx := context.Background()
	st := fence.NewMemoryStore()
	defer st.Close()
	writes := map[string]func(fence.Tx) error{
		"Put":            func(tx fence.Tx) error { return tx.Put(&fence.Record{Intent: "x", State: fence.StateDone}) },
		"Delete":         func(tx fence.Tx) error { return tx.Delete("x") },
		"SetDomainSeq":   func(tx fence.Tx) error { return tx.SetDomainSeq("d", 7) },
		"DeleteDomain":   func(tx fence.Tx) error { return tx.DeleteDomain("d") },
		"SetDomainFloor": func(tx fence.Tx) error { return tx.SetDomainFloor(9) },
		"NextToken":      func(tx fence.Tx) error { _, err := tx.NextToken(); return err },
		"AppendEvent":    func(tx fence.Tx) error { return tx.AppendEvent(fence.Event{Intent: "x", Kind: fence.EventClear}) },
		"DeleteEventsBefore": func(tx fence.Tx) error {
			_, err := tx.DeleteEventsBefore(time.Now())
			return err
		},
		"AddCounters": func(tx fence.Tx) error { return tx.AddCounters(fence.Counters{Admitted: 1}) },
	}
	for name, write := range writes {
		if err := st.View(ctx, write); err == nil {
			t.Errorf("%s in a read transaction succeeded", name)
		}
	}
	err := st.View(ctx, func(tx fence.Tx) error {
		rec, _ := tx.Get("x")
		seq, found, _ := tx.DomainSeq("d")
		floor, _ := tx.DomainFloor()
		counts, _ := tx.Counters()
		events := 0
		_ = tx.Events("", func(fence.Event) bool { events++; return true })
		if rec != nil || found || seq != 0 || floor != 0 || !counts.IsZero() || events != 0 {
			t.Errorf("refused writes left rec=%v domain=%d/%v floor=%d counters=%+v events=%d", rec, seq, found, floor, counts, events)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var token uint64
	if err := st.Update(ctx, func(tx fence.Tx) error { token, err = tx.NextToken(); return err }); err != nil || token != 1 {
		t.Fatalf("first token after refused NextToken = %d, %v; want 1", token, err)
	}
}

// TestMemoryStoreRollbackAfterGetAndPut: a write transaction that reads an intent and then
// writes it (Put takes what it overwrites from that read) and fails restores every record as
// it was, whatever the order of reads, writes and deletes.
func TestMemoryStoreRollbackAfterGetAndPut(t *testing.T) {
	ctx := context.Background()
	st := fence.NewMemoryStore()
	defer st.Close()
	x0 := &fence.Record{Intent: "x", State: fence.StateDone}
	if err := st.Update(ctx, func(tx fence.Tx) error { return tx.Put(x0) }); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("fail")
	err := st.Update(ctx, func(tx fence.Tx) error {
		steps := []func() error{
			func() error { _, err := tx.Get("x"); return err },
			func() error { return tx.Put(&fence.Record{Intent: "x", State: fence.StateInFlight}) },
			func() error { return tx.Put(&fence.Record{Intent: "x", State: fence.StateFailed}) },
			func() error { _, err := tx.Get("a"); return err },
			func() error { return tx.Put(&fence.Record{Intent: "a"}) },
			func() error { return tx.Delete("x") },
			func() error { return tx.Put(&fence.Record{Intent: "x", State: fence.StateUnknown}) },
			func() error { _, err := tx.Get("b"); return err },
			func() error { return tx.Put(&fence.Record{Intent: "a", State: fence.StateDone}) },
			func() error { return tx.Put(&fence.Record{Intent: "b"}) },
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		return failed
	})
	if err != failed {
		t.Fatalf("Update = %v; want the transaction's own error", err)
	}
	_ = st.View(ctx, func(tx fence.Tx) error {
		for intent, want := range map[string]*fence.Record{"x": x0, "a": nil, "b": nil} {
			if got, _ := tx.Get(intent); got != want {
				t.Errorf("after rollback %q = %+v; want %+v", intent, got, want)
			}
		}
		return nil
	})
}

// TestMemoryStoreRollbackUndoesOnlyItsOwnWrites: the write transaction and its undo log are
// reused; a failed transaction restores the floor, the events and the counters it changed to
// what the previous, committed transaction left, not to what that one found.
func TestMemoryStoreRollbackUndoesOnlyItsOwnWrites(t *testing.T) {
	ctx := context.Background()
	st := fence.NewMemoryStore()
	defer st.Close()
	first := fence.Event{Intent: "x", Kind: fence.EventClear}
	err := st.Update(ctx, func(tx fence.Tx) error {
		if err := tx.SetDomainFloor(5); err != nil {
			return err
		}
		if err := tx.AddCounters(fence.Counters{Admitted: 1}); err != nil {
			return err
		}
		if err := tx.SetDomainSeq("d", 3); err != nil {
			return err
		}
		return tx.AppendEvent(first)
	})
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("fail")
	for name, write := range map[string]func(fence.Tx) error{
		"SetDomainFloor": func(tx fence.Tx) error { return tx.SetDomainFloor(9) },
		"AddCounters":    func(tx fence.Tx) error { return tx.AddCounters(fence.Counters{Admitted: 1}) },
		"SetDomainSeq":   func(tx fence.Tx) error { return tx.SetDomainSeq("d", 4) },
		"AppendEvent":    func(tx fence.Tx) error { return tx.AppendEvent(fence.Event{Intent: "y", Kind: fence.EventClear}) },
	} {
		if err := st.Update(ctx, func(tx fence.Tx) error {
			if err := write(tx); err != nil {
				return err
			}
			return failed
		}); err != failed {
			t.Fatalf("%s: Update = %v; want the transaction's own error", name, err)
		}
		_ = st.View(ctx, func(tx fence.Tx) error {
			floor, _ := tx.DomainFloor()
			counts, _ := tx.Counters()
			seq, _, _ := tx.DomainSeq("d")
			var events []fence.Event
			_ = tx.Events("", func(ev fence.Event) bool { events = append(events, ev); return true })
			if floor != 5 || counts.Admitted != 1 || seq != 3 || len(events) != 1 || events[0] != first {
				t.Errorf("after a failed %s: floor %d, admitted %d, seq %d, events %+v; want 5, 1, 3 and the first event", name, floor, counts.Admitted, seq, events)
			}
			return nil
		})
	}
}

// TestMemoryStoreRollbackAfterRolledBackPut: a transaction that writes an intent without
// reading it first, after one that wrote it and was rolled back, restores what is recorded,
// not what the rolled-back transaction wrote (Put must not take what it overwrites from an
// earlier transaction's write).
func TestMemoryStoreRollbackAfterRolledBackPut(t *testing.T) {
	ctx := context.Background()
	st := fence.NewMemoryStore()
	defer st.Close()
	x0 := &fence.Record{Intent: "x", State: fence.StateDone}
	if err := st.Update(ctx, func(tx fence.Tx) error { return tx.Put(x0) }); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("fail")
	for _, state := range []fence.State{fence.StateFailed, fence.StateUnknown} {
		err := st.Update(ctx, func(tx fence.Tx) error {
			if err := tx.Put(&fence.Record{Intent: "x", State: state}); err != nil {
				return err
			}
			return failed
		})
		if err != failed {
			t.Fatalf("Update = %v; want the transaction's own error", err)
		}
	}
	_ = st.View(ctx, func(tx fence.Tx) error {
		if got, _ := tx.Get("x"); got != x0 {
			t.Errorf("after two rolled-back writes x = %+v; want %+v", got, x0)
		}
		return nil
	})
}

// TestMemoryStoreRollbackOnPanicAndGoexit: a transaction function that panics (the engine
// calls the configured Liveness inside transactions) or ends its goroutine (t.FailNow) leaves
// no write behind, as one that returns an error does: the records table, the domains, the
// floor, the events and the counters are as the last committed transaction left them, and the
// store takes the next transaction.
func TestMemoryStoreRollbackOnPanicAndGoexit(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"panic", "Goexit"} {
		t.Run(how, func(t *testing.T) {
			st := fence.NewMemoryStore()
			defer st.Close()
			x0 := &fence.Record{Intent: "x", State: fence.StateDone}
			err := st.Update(ctx, func(tx fence.Tx) error {
				for _, w := range []error{tx.Put(x0), tx.Put(&fence.Record{Intent: "y"}), tx.SetDomainSeq("d", 3),
					tx.SetDomainFloor(2), tx.AppendEvent(fence.Event{Intent: "x", Kind: fence.EventClear}),
					tx.AddCounters(fence.Counters{Admitted: 1})} {
					if w != nil {
						return w
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var y0 *fence.Record
			_ = st.View(ctx, func(tx fence.Tx) error { y0, _ = tx.Get("y"); return nil })
			done := make(chan any)
			go func() {
				defer func() { done <- recover() }()
				_ = st.Update(ctx, func(tx fence.Tx) error {
					if _, err := tx.Get("x"); err != nil {
						return err
					}
					_ = tx.Put(&fence.Record{Intent: "x", State: fence.StateInFlight})
					_ = tx.Delete("y")
					for i := range 20 { // enough to grow the table
						_ = tx.Put(&fence.Record{Intent: "new" + string(rune('a'+i))})
					}
					_ = tx.SetDomainSeq("d", 4)
					_ = tx.SetDomainSeq("e", 1)
					_ = tx.SetDomainFloor(9)
					_ = tx.AppendEvent(fence.Event{Intent: "y", Kind: fence.EventClear})
					_ = tx.AddCounters(fence.Counters{Admitted: 5})
					if how == "panic" {
						panic("liveness checker failed")
					}
					runtime.Goexit()
					return nil
				})
			}()
			if r := <-done; (r != nil) != (how == "panic") {
				t.Fatalf("recovered %v", r)
			}
			err = st.View(ctx, func(tx fence.Tx) error {
				var intents []string
				_ = tx.Scan(fence.Filter{}, func(r *fence.Record) bool { intents = append(intents, r.Intent); return true })
				x, _ := tx.Get("x")
				y, _ := tx.Get("y")
				d, _, _ := tx.DomainSeq("d")
				_, eFound, _ := tx.DomainSeq("e")
				floor, _ := tx.DomainFloor()
				counts, _ := tx.Counters()
				events := 0
				_ = tx.Events("", func(fence.Event) bool { events++; return true })
				if x != x0 || y != y0 || len(intents) != 2 || d != 3 || eFound || floor != 2 || counts.Admitted != 1 || events != 1 {
					t.Errorf("after a %s inside Update: x kept %v, y kept %v, records %q, seq of d %d, e recorded %v, floor %d, admitted %d, %d events; want what the first transaction wrote",
						how, x == x0, y == y0, intents, d, eFound, floor, counts.Admitted, events)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Update(ctx, func(tx fence.Tx) error { return tx.Put(&fence.Record{Intent: "z"}) }); err != nil {
				t.Fatalf("the next transaction: %v", err)
			}
		})
	}
}

// TestMemoryStoreCertByHashDoneFirstByIntent: CertByHash returns a done record only (as the
// Tx contract and the SQL stores' queries say), and of several done records with the hash the
// first by intent (as PostgreSQL's query orders), whatever order the records table holds them
// in.
func TestMemoryStoreCertByHashDoneFirstByIntent(t *testing.T) {
	ctx := context.Background()
	st := fence.NewMemoryStore()
	defer st.Close()
	var first *fence.Record
	err := st.Update(ctx, func(tx fence.Tx) error {
		for i := 99; i >= 0; i-- {
			rec := &fence.Record{Intent: fmt.Sprintf("done-%02d", i), State: fence.StateDone, Cert: &fence.Cert{Hash: "shared"}}
			if i == 0 {
				first = rec
			}
			if err := tx.Put(rec); err != nil {
				return err
			}
		}
		for _, s := range []fence.State{fence.StateInFlight, fence.StateFailed, fence.StateUnknown} {
			for _, hash := range []string{"shared", "notdone"} {
				// "a-" sorts before "done-"
				if err := tx.Put(&fence.Record{Intent: "a-" + hash + "-" + string(s), State: s, Cert: &fence.Cert{Hash: hash}}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []func(context.Context, func(fence.Tx) error) error{st.View, st.Update} {
		_ = run(ctx, func(tx fence.Tx) error {
			if got, err := tx.CertByHash("shared"); err != nil || got != first {
				t.Errorf("CertByHash(shared) = %+v, %v; want done-00", got, err)
			}
			if got, err := tx.CertByHash("notdone"); err != nil || got != nil {
				t.Errorf("CertByHash(notdone) = %+v, %v; want none (no done record has it)", got, err)
			}
			return nil
		})
	}
}

// A ByExpiry scan (a sweep's batch) holds only its Limit oldest records while it reads the
// table: it gathered and sorted every record with an expiry instead, batch after batch, so a
// sweep of a backlog cost the backlog's square. Bytes, not time: the same on a loaded machine.
func TestMemoryScanByExpiryAllocatesOnlyItsBatch(t *testing.T) {
	ctx := context.Background()
	st := fence.NewMemoryStore()
	const expired = 20000
	err := st.Update(ctx, func(tx fence.Tx) error {
		now := tx.Now()
		for i := range expired {
			intent := fmt.Sprintf("old:%05d", i)
			rec := &fence.Record{Intent: intent, State: fence.StateDone, Tool: "t", Args: []byte("null"),
				ExpiresAt: now.Add(-time.Minute - time.Duration((i*7919)%expired)*time.Millisecond)}
			if err := tx.Put(rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// TotalAlloc counts every goroutine of the process, so the least of a few scans is the
	// scan's own (CI once saw 5688 bytes, other goroutines' allocations included).
	least := uint64(1 << 62)
	for range 5 {
		err = st.View(ctx, func(tx fence.Tx) error {
			n := 0
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := tx.Scan(fence.Filter{States: []fence.State{fence.StateDone}, ExpiresBefore: tx.Now(), Limit: 10, ByExpiry: true}, func(*fence.Record) bool {
				n++
				return true
			})
			runtime.ReadMemStats(&after)
			if n != 10 {
				t.Errorf("the scan gave %d records; want 10", n)
			}
			least = min(least, after.TotalAlloc-before.TotalAlloc)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if least > 4<<10 {
		t.Errorf("a ByExpiry scan of 10 among %d expired records allocated %d bytes (the least of 5 scans); want at most 4 KB", expired, least)
	}
}
