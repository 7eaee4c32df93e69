package fence

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
