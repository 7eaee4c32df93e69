package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestPutOfAnAbsentIntent: a transaction that found an intent without a record writes its first
// record with a plain INSERT; one that wrote or deleted the intent since, or did not read it,
// writes over whatever is there. Every sequence lands.
func TestPutOfAnAbsentIntent(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	rec := func(intent string, st fence.State) *fence.Record {
		return &fence.Record{Intent: intent, State: st}
	}
	steps := []struct {
		name, intent string
		want         fence.State // StateNone: no record
		fn           func(tx fence.Tx) error
	}{
		{"read, put", "absent:a", fence.StateInFlight, func(tx fence.Tx) error {
			if _, err := tx.Get("absent:a"); err != nil {
				return err
			}
			return tx.Put(rec("absent:a", fence.StateInFlight))
		}},
		{"read, put twice", "absent:b", fence.StateDone, func(tx fence.Tx) error {
			if _, err := tx.Get("absent:b"); err != nil {
				return err
			}
			if err := tx.Put(rec("absent:b", fence.StateInFlight)); err != nil {
				return err
			}
			return tx.Put(rec("absent:b", fence.StateDone))
		}},
		{"read a record, delete it, put", "absent:a", fence.StateDone, func(tx fence.Tx) error {
			if _, err := tx.Get("absent:a"); err != nil {
				return err
			}
			if err := tx.Delete("absent:a"); err != nil {
				return err
			}
			return tx.Put(rec("absent:a", fence.StateDone))
		}},
		{"read, delete, put", "absent:c", fence.StateInFlight, func(tx fence.Tx) error {
			if _, err := tx.Get("absent:c"); err != nil {
				return err
			}
			if err := tx.Delete("absent:c"); err != nil {
				return err
			}
			return tx.Put(rec("absent:c", fence.StateInFlight))
		}},
		{"put over a record unread", "absent:b", fence.StateFailed, func(tx fence.Tx) error {
			return tx.Put(rec("absent:b", fence.StateFailed))
		}},
	}
	for _, st := range steps {
		if err := s.Update(ctx, st.fn); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		var got *fence.Record
		if err := s.View(ctx, func(tx fence.Tx) (err error) { got, err = tx.Get(st.intent); return err }); err != nil {
			t.Fatal(err)
		}
		if got == nil || got.State != st.want {
			t.Fatalf("%s: recorded %+v, want %s", st.name, got, st.want)
		}
	}
}

// TestPutOfAnAbsentIntentNeverOverwrites: a record that appears after the transaction found
// none (written outside effectfence, without the intent's lock) makes the claim fail; it is
// not overwritten.
func TestPutOfAnAbsentIntentNeverOverwrites(t *testing.T) {
	schema := testSchema(t)
	s := openSchema(t, schema)
	conn := admin(t, schema)
	ctx := context.Background()
	intent := "absent:outside"
	s.hook = func(stage string, _ uint32) {
		if stage == "begin" {
			if _, err := conn.Exec(ctx, `INSERT INTO effectfence_records (intent, state, body) VALUES ($1, 'done', '\x7b7d')`, intent); err != nil {
				t.Error(err)
			}
		}
	}
	err := s.Update(ctx, func(tx fence.Tx) error {
		if rec, err := tx.Get(intent); err != nil || rec != nil {
			t.Errorf("read %+v %v, want no record", rec, err)
		}
		return tx.Put(&fence.Record{Intent: intent, State: fence.StateInFlight})
	})
	s.hook = nil
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("the claim over a record written meanwhile: %v; want a unique violation", err)
	}
	var state string
	if err := conn.QueryRow(ctx, "SELECT state FROM effectfence_records WHERE intent = $1", intent).Scan(&state); err != nil || state != "done" {
		t.Fatalf("the record is %q (%v); want the one written outside, untouched", state, err)
	}
}
