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

// TestCheckNamesUnreadableEvents damages audit events (a token below zero) beside a sound
// ledger's records: Check reports the file not OK, names each such event by its row and
// intent, and advises removing the event, not moving the whole ledger aside (which would drop
// every receipt it holds). With an unreadable record too, both are named and both removals
// advised. Before, Check counted events and named none, and said OK.
func TestCheckNamesUnreadableEvents(t *testing.T) {
	t.Parallel()
	for _, withRecord := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "ledger.db")
		seedLedger(t, path, 3)
		st, err := sqlite.Open(ctx, path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Unix(1_800_000_000, 0)
		err = st.Update(ctx, func(tx fence.Tx) error {
			for i := range 30 {
				if err := tx.AppendEvent(fence.Event{At: at, Intent: fmt.Sprintf("seed:%04d", i%3), Kind: fence.EventClear, Who: "op", Reason: fmt.Sprint(i), State: fence.StateFailed, Token: uint64(i + 1)}); err != nil {
					return err
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
		rep, err := sqlite.Check(ctx, path)
		if err != nil || !rep.OK {
			t.Fatalf("Check of the sound ledger: %+v, %v", rep, err)
		}
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, intent := range []string{"seed:0001", "seed:0002"} {
			var id int64
			if err := db.QueryRowContext(ctx, "UPDATE events SET token = -7 WHERE id = (SELECT max(id) FROM events WHERE intent = ?) RETURNING id", intent).Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if withRecord {
			if _, err := db.ExecContext(ctx, `UPDATE records SET body = CAST('{"intent":' AS BLOB) WHERE intent = 'seed:0000'`); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		rep, err = sqlite.Check(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("problems %q\nadvice %q", rep.Problems, rep.Advice)
		if rep.OK {
			t.Errorf("Check reports a ledger with unreadable audit events OK")
		}
		has := func(list []string, want string) bool {
			return slices.ContainsFunc(list, func(p string) bool { return strings.Contains(p, want) })
		}
		for i, intent := range []string{"seed:0001", "seed:0002"} {
			if want := fmt.Sprintf("audit event %d of intent %q is unreadable", ids[i], intent); !has(rep.Problems, want) {
				t.Errorf("no problem says %s", want)
			}
		}
		if want := fmt.Sprintf("DELETE FROM events WHERE id = %d", ids[0]); !has(rep.Advice, want) {
			t.Errorf("no advice removes the first unreadable event (%s)", want)
		}
		if has(rep.Advice, "move it aside") {
			t.Errorf("Check advises moving a ledger aside for unreadable rows that hide nothing else")
		}
		if withRecord && (!has(rep.Problems, `"seed:0000" is unreadable`) || !has(rep.Advice, "DELETE FROM records WHERE intent = 'seed:0000'")) {
			t.Errorf("the unreadable record beside them is not named, or its removal not advised")
		}
	}
}
