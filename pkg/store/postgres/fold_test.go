package postgres

import (
	"context"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestCountersFoldedIntoRecordWrites: counters added right after a record write travel in that
// write's statement, and otherwise in their own; either way each is counted exactly once and
// the writes land.
func TestCountersFoldedIntoRecordWrites(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	rec := func(intent string, st fence.State) *fence.Record {
		return &fence.Record{Intent: intent, State: st}
	}
	one := fence.Counters{Admitted: 1}
	steps := []struct {
		name string
		adds uint64 // AddCounters calls
		fn   func(tx fence.Tx) error
	}{
		{"put then counters", 1, func(tx fence.Tx) error {
			if err := tx.Put(rec("fold:a", fence.StateInFlight)); err != nil {
				return err
			}
			return tx.AddCounters(one)
		}},
		{"counters alone", 1, func(tx fence.Tx) error { return tx.AddCounters(one) }},
		{"counters then put", 1, func(tx fence.Tx) error {
			if err := tx.AddCounters(one); err != nil {
				return err
			}
			return tx.Put(rec("fold:b", fence.StateInFlight))
		}},
		{"put, counters twice", 2, func(tx fence.Tx) error {
			if err := tx.Put(rec("fold:c", fence.StateInFlight)); err != nil {
				return err
			}
			if err := tx.AddCounters(one); err != nil {
				return err
			}
			return tx.AddCounters(one)
		}},
		{"read, end a claim, counters", 1, func(tx fence.Tx) error {
			if _, err := tx.Get("fold:a"); err != nil {
				return err
			}
			if err := tx.Put(rec("fold:a", fence.StateDone)); err != nil {
				return err
			}
			return tx.AddCounters(one)
		}},
		{"delete a claim, counters", 1, func(tx fence.Tx) error {
			if err := tx.Delete("fold:b"); err != nil {
				return err
			}
			return tx.AddCounters(one)
		}},
		{"put, event, counters", 1, func(tx fence.Tx) error {
			if err := tx.Put(rec("fold:d", fence.StateInFlight)); err != nil {
				return err
			}
			if err := tx.AppendEvent(fence.Event{At: tx.Now(), Intent: "fold:d", Kind: "test"}); err != nil {
				return err
			}
			return tx.AddCounters(one)
		}},
	}
	var admitted uint64
	for _, st := range steps {
		if err := s.Update(ctx, st.fn); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		admitted += st.adds
		var got fence.Counters
		if err := s.View(ctx, func(tx fence.Tx) (err error) { got, err = tx.Counters(); return err }); err != nil {
			t.Fatal(err)
		}
		if got.Admitted != admitted {
			t.Fatalf("after %s: admitted %d, want %d", st.name, got.Admitted, admitted)
		}
	}
	want := map[string]fence.State{"fold:a": fence.StateDone, "fold:b": fence.StateNone, "fold:c": fence.StateInFlight, "fold:d": fence.StateInFlight}
	err := s.View(ctx, func(tx fence.Tx) error {
		for intent, st := range want {
			r, err := tx.Get(intent)
			if err != nil {
				return err
			}
			if got := fence.StateNone; r != nil {
				got = r.State
				if got != st {
					t.Errorf("%s: %s, want %s", intent, got, st)
				}
			} else if st != fence.StateNone {
				t.Errorf("%s: no record, want %s", intent, st)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
