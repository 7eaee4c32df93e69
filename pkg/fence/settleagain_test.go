package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// cutStore applies an Update and then answers an error (its commit landed, the answer was
// lost) when lose is set, and is down, applying nothing, while down is set.
type cutStore struct {
	Store
	lose atomic.Bool
	down atomic.Bool
}

var errCut = errors.New("connection cut after the transaction was sent")

func (s *cutStore) Update(ctx context.Context, fn func(Tx) error) error {
	if s.down.Load() {
		return errCut
	}
	err := s.Store.Update(ctx, fn)
	if err == nil && s.lose.CompareAndSwap(true, false) {
		s.down.Store(true)
		return errCut
	}
	return err
}

func (s *cutStore) View(ctx context.Context, fn func(Tx) error) error {
	if s.down.Load() {
		return errCut
	}
	return s.Store.View(ctx, fn)
}

// TestSettleAgainOfAnOutcomeHeldInMemory: an outcome whose first report landed, its answer
// lost, while neither the ledger (down from then on) nor the spool (unwritable) took it again
// before Settle's context ended, is held in memory, and Settle's caller tries again: wrap's
// settle calls Settle anew, round after round, until the outcome is kept somewhere. That call
// is the holder's settle tried again (docs/RELIABILITY.md: answered as the first was, writing
// nothing). Before, Settle's first report in a call was never a retry: the release, abort or
// lost that had landed was refused lease_lost and kept in the audit trail as a late result
// forever ("late release refused"), its lease counted lost, although the ledger held it.
func TestSettleAgainOfAnOutcomeHeldInMemory(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []OutcomeKind{OutcomeRelease, OutcomeAbort, OutcomeLost} {
		t.Run(string(kind), func(t *testing.T) {
			notDir := filepath.Join(t.TempDir(), "spool")
			if err := os.WriteFile(notDir, nil, 0o600); err != nil { // the spool cannot be made there
				t.Fatal(err)
			}
			mem := NewMemoryStore()
			s := &cutStore{Store: mem}
			e := New(s, Config{SpoolDir: notDir})
			defer e.Close()
			r := Request{Intent: "order:" + string(kind), Tool: "charge", Args: json.RawMessage(`{"usd":1}`)}
			adm, err := e.Prepare(ctx, r)
			if err != nil || !adm.Fresh() {
				t.Fatal(adm, err)
			}
			o := Outcome{Kind: kind, Ticket: *adm.Ticket, Reason: "the tool answered isError"}
			s.lose.Store(true)
			sctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			_, err = e.Settle(sctx, o)
			cancel()
			if err == nil || CodeOf(err) != CodeStore || !e.spool.holds(r.Intent) {
				t.Fatalf("first settle: %v (held %v); want a ledger error with the outcome held in memory", err, e.spool.holds(r.Intent))
			}
			s.down.Store(false) // the ledger answers again
			if _, err := e.Settle(ctx, o); err != nil {
				t.Errorf("settle again of the %s that landed: %v; want nil, as the first would have been answered", kind, err)
			}
			late := 0
			if err := mem.View(ctx, func(tx Tx) error {
				return tx.Events(r.Intent, func(ev Event) bool {
					if ev.Kind == EventLateResult {
						late++
						t.Logf("late result: %s", ev.Reason)
					}
					return true
				})
			}); err != nil {
				t.Fatal(err)
			}
			if late != 0 {
				t.Errorf("%d late results kept for a %s the ledger recorded", late, kind)
			}
			if st, _ := e.Stats(ctx); st.SinceBoot.LeaseLost != 0 {
				t.Errorf("%d leases counted lost", st.SinceBoot.LeaseLost)
			}
		})
	}
}

// TestCloseNamesTheOutcomesItsMemoryHeld: an outcome neither the ledger nor the spool took is
// held in memory, and its Settle is answered that every Recover tries again. At Close the
// engine tries once more; one it still cannot keep ends with the process, and Close's error
// names it (wrap prints it). Before, it ended without a word. One the ledger takes by then is
// recorded and not named.
func TestCloseNamesTheOutcomesItsMemoryHeld(t *testing.T) {
	ctx := context.Background()
	for _, back := range []bool{false, true} {
		t.Run(fmt.Sprintf("ledger back %v", back), func(t *testing.T) {
			notDir := filepath.Join(t.TempDir(), "spool")
			if err := os.WriteFile(notDir, nil, 0o600); err != nil { // the spool cannot be made there
				t.Fatal(err)
			}
			mem := NewMemoryStore()
			s := &cutStore{Store: mem}
			e := New(keptOpen{s}, Config{SpoolDir: notDir}) // read after Close below
			r := Request{Intent: "order:held", Tool: "charge", Args: json.RawMessage(`{"usd":1}`)}
			adm, err := e.Prepare(ctx, r)
			if err != nil || !adm.Fresh() {
				t.Fatal(adm, err)
			}
			s.down.Store(true)
			sctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			_, err = e.Settle(sctx, Outcome{Kind: OutcomeCommit, Ticket: *adm.Ticket, Result: json.RawMessage(`"charged"`)})
			cancel()
			if err == nil || !e.spool.holds(r.Intent) {
				t.Fatalf("settle with the ledger and the spool down: %v (held %v); want it held in memory", err, e.spool.holds(r.Intent))
			}
			s.down.Store(!back)
			err = e.Close()
			named := err != nil && strings.Contains(err.Error(), `intent "order:held"`) && strings.Contains(err.Error(), "end with this process")
			var state State
			if verr := mem.View(ctx, func(tx Tx) error {
				rec, err := tx.Get(r.Intent)
				if rec != nil {
					state = rec.State
				}
				return err
			}); verr != nil {
				t.Fatal(verr)
			}
			switch {
			case back && (named || state != StateDone):
				t.Fatalf("close with the ledger back: %v, record %s; want the commit recorded, not named", err, state)
			case !back && !named:
				t.Fatalf("close with the ledger down: %v; want the held commit named as ending with the process", err)
			}
		})
	}
}

// keptOpen is a store that Close leaves open, to be read after its engine is closed.
type keptOpen struct{ *cutStore }

func (keptOpen) Close() error { return nil }
