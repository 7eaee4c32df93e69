package fence_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// lossyStore stands for a shared store whose connection dies: with lose set, the next Update
// is applied and then answers an error (its COMMIT landed, the answer was lost), and the
// store goes down; while down, every Update and View fails and applies nothing.
type lossyStore struct {
	fence.Store
	lose atomic.Bool
	down atomic.Bool
}

var errConnLost = errors.New("connection lost after the claim was sent, and the server could not be asked")

func (s *lossyStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if s.down.Load() {
		return errConnLost
	}
	err := s.Store.Update(ctx, fn)
	if err == nil && s.lose.CompareAndSwap(true, false) {
		s.down.Store(true)
		return errConnLost
	}
	return err
}

// Close leaves the memory store open, as closing a connection leaves a shared ledger's data:
// the test reads it afterwards.
func (s *lossyStore) Close() error { return nil }

func (s *lossyStore) View(ctx context.Context, fn func(fence.Tx) error) error {
	if s.down.Load() {
		return errConnLost
	}
	return s.Store.View(ctx, fn)
}

// record reads intent's record and release events straight from the memory store.
func recordOf(t *testing.T, m *fence.MemoryStore, intent string) (rec *fence.Record, releases []fence.Event) {
	t.Helper()
	err := m.View(context.Background(), func(tx fence.Tx) error {
		r, err := tx.Get(intent)
		if err != nil {
			return err
		}
		if r != nil {
			c := *r
			rec = &c
		}
		return tx.Events(intent, func(ev fence.Event) bool {
			if ev.Kind == fence.EventRelease {
				releases = append(releases, ev)
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec, releases
}

// A claim recorded although Prepare failed (its answer lost) is released by the engine once
// the ledger answers again, while the process runs: nobody got its ticket, so nobody will
// ever run its call or report its outcome. Before, it stayed in flight, then unknown with a
// live holder: every retry refused, and an operator's clear refused without --force.
func TestLostClaimIsReleasedOnceTheLedgerAnswers(t *testing.T) {
	mem := fence.NewMemoryStore()
	s := &lossyStore{Store: mem}
	eng := fence.New(s, fence.Config{})
	defer eng.Close()
	req := fence.Request{Intent: "charge:order-7", Tool: "charge", Args: []byte(`{"amount":5}`)}
	s.lose.Store(true)
	if _, err := eng.Prepare(context.Background(), req); fence.CodeOf(err) != fence.CodeStore {
		t.Fatalf("Prepare with its answer lost: %v, want a store error", err)
	}
	if rec, _ := recordOf(t, mem, req.Intent); rec == nil || rec.State != fence.StateInFlight {
		t.Fatalf("the lost claim is not in the ledger (%+v): the test lost nothing", rec)
	}
	s.down.Store(false) // the ledger is back
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec, rel := recordOf(t, mem, req.Intent)
		if rec == nil && len(rel) == 1 {
			if rel[0].State != fence.StateInFlight || rel[0].Token == 0 || rel[0].Reason == "" {
				t.Fatalf("release event %+v", rel[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lost claim is still %+v (releases %v) with the ledger answering", rec, rel)
		}
		time.Sleep(20 * time.Millisecond)
	}
	adm, err := eng.Prepare(context.Background(), req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("the retry after the release: %+v %v, want a fresh admission", adm, err)
	}
}

// A claim that never landed leaves nothing to release, and a claim that another attempt has
// taken over since is left to it: only the very claim Prepare wrote is released.
func TestLostClaimReleasesOnlyItsOwnClaim(t *testing.T) {
	ctx := context.Background()
	t.Run("never recorded", func(t *testing.T) {
		mem := fence.NewMemoryStore()
		s := &lossyStore{Store: mem}
		eng := fence.New(s, fence.Config{})
		s.down.Store(true)
		req := fence.Request{Intent: "a", Tool: "t"}
		if _, err := eng.Prepare(ctx, req); fence.CodeOf(err) != fence.CodeStore {
			t.Fatalf("Prepare with the ledger down: %v", err)
		}
		s.down.Store(false)
		if err := eng.Close(); err != nil { // tries the release once more and waits for it
			t.Fatal(err)
		}
		if rec, rel := recordOf(t, mem, "a"); rec != nil || len(rel) != 0 {
			t.Fatalf("record %+v, releases %v: want none", rec, rel)
		}
	})
	t.Run("taken over", func(t *testing.T) {
		mem := fence.NewMemoryStore()
		s := &lossyStore{Store: mem}
		// The first engine's owner is a process the second sees as gone, so its claim, re-run
		// safe, is taken over once its lease lapses.
		first := fence.New(s, fence.Config{Owner: "elsewhere/1", LeaseTTL: 50 * time.Millisecond})
		req := fence.Request{Intent: "b", Tool: "t", RerunSafe: true}
		s.lose.Store(true)
		if _, err := first.Prepare(ctx, req); fence.CodeOf(err) != fence.CodeStore {
			t.Fatalf("Prepare with its answer lost: %v", err)
		}
		lost, _ := recordOf(t, mem, "b")
		time.Sleep(100 * time.Millisecond) // past the lost claim's lease
		second := fence.New(mem, fence.Config{Liveness: func(string) fence.Liveness { return fence.Dead }})
		adm, err := second.Prepare(ctx, req)
		if err != nil || adm.Ticket == nil {
			t.Fatalf("the takeover: %+v %v", adm, err)
		}
		s.down.Store(false)
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}
		rec, rel := recordOf(t, mem, "b")
		if lost == nil || rec == nil || rec.State != fence.StateInFlight || rec.Nonce == lost.Nonce || rec.Token != adm.Ticket.Token || len(rel) != 0 {
			t.Fatalf("after the lost claim's release: record %+v, releases %v; want the second attempt's claim untouched", rec, rel)
		}
	})
}
