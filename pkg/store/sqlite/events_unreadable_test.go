package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestEventsGoOnPastUnreadableEvents damages audit events with SQL (a token below zero, which
// the column takes) at the edges of the events' pages among 600 events of one intent:
// EventsSkipping (the operator's show and export) gets every other event, in order, and each
// damaged one by its intent and row; Events (the engine's reads) ends at the first with its
// error.
func TestEventsGoOnPastUnreadableEvents(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const n = 600
	at := time.Unix(1_800_000_000, 0)
	err = st.Update(ctx, func(tx fence.Tx) error {
		for i := range n {
			if err := tx.AppendEvent(fence.Event{At: at, Intent: "charge:1", Kind: fence.EventClear, Who: "op", Reason: fmt.Sprint(i), State: fence.StateFailed, Token: uint64(i + 1)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	damaged := []int64{1, 255, 256, 257, 512, 600} // row ids: the first row, the edges of pages of 256, the last
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range damaged {
		if _, err := db.ExecContext(ctx, "UPDATE events SET token = -1 WHERE id = ?", id); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	var idx []int // the events' indices: row ids from 1
	for _, id := range damaged {
		idx = append(idx, int(id-1))
	}
	err = fencetest.CheckEventsPastUnreadable(t, st, n, idx, damaged, func(id int64) string { return fmt.Sprintf("DELETE FROM events WHERE id = %d", id) })
	var fe *sqlite.FileError
	if !errors.As(err, &fe) {
		t.Errorf("Events of a trail with an unreadable event: %v; want the file's error", err)
	}
}
