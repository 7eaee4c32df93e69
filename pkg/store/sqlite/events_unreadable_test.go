package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
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

	for _, intent := range []string{"charge:1", ""} {
		var got []string
		var bad []int64
		err := st.View(ctx, func(tx fence.Tx) error {
			got, bad = nil, nil
			s, ok := tx.(fence.EventsSkipping)
			if !ok {
				return errors.New("the SQLite store's Tx does not skip unreadable events")
			}
			return s.EventsSkipping(intent, func(ev fence.Event) bool {
				got = append(got, ev.Reason)
				return true
			}, func(u *fence.UnreadableEventError) {
				if u.Intent != "charge:1" || !strings.Contains(u.Error(), fmt.Sprintf("DELETE FROM events WHERE id = %d", u.ID)) {
					t.Errorf("unreadable event %d: %q of %q", u.ID, u.Error(), u.Intent)
				}
				bad = append(bad, u.ID)
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for i := range n {
			if !slices.Contains(damaged, int64(i+1)) {
				want = append(want, fmt.Sprint(i))
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") || fmt.Sprint(bad) != fmt.Sprint(damaged) {
			t.Errorf("events of %q: %d read (want %d), unreadable %v (want %v)", intent, len(got), len(want), bad, damaged)
		}
	}
	err = st.View(ctx, func(tx fence.Tx) error {
		return tx.Events("charge:1", func(fence.Event) bool { return true })
	})
	var fe *sqlite.FileError
	if !errors.As(err, &fe) {
		t.Errorf("Events of a trail with an unreadable event: %v; want the file's error", err)
	}
}
