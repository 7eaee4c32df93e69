package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

// TestEventsGoOnPastUnreadableEvents damages audit event bodies with SQL (set to '\x00') at
// the edges of the events' pages (5 rows) among 23 events of one intent: EventsSkipping (the
// operator's show and export) gets every other event, in order, and each damaged one by its
// intent and row, with the statement that removes it; Events (the engine's reads) ends at
// the first with its error.
func TestEventsGoOnPastUnreadableEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testSchema(t)
	s := openSchema(t, schema)
	const page, n = 5, 23
	s.scanPage = page
	err := s.Update(ctx, func(tx fence.Tx) error {
		for i := range n {
			if err := tx.AppendEvent(fence.Event{At: tx.Now(), Intent: "charge:1", Kind: fence.EventClear, Who: "op", Reason: fmt.Sprint(i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	table := pgx.Identifier{schema, "effectfence_events"}.Sanitize()
	rows, err := conn.Query(ctx, "SELECT id FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(ids) != n {
		t.Fatalf("event ids %v: %v", ids, err)
	}
	at := []int{0, 4, 5, 6, 10, 22} // the first, the edges of pages of 5, the last
	var damaged []int64
	for _, i := range at {
		damaged = append(damaged, ids[i])
		if _, err := conn.Exec(ctx, "UPDATE "+table+` SET body = '\x00' WHERE id = $1`, ids[i]); err != nil {
			t.Fatal(err)
		}
	}

	err = fencetest.CheckEventsPastUnreadable(t, s, n, at, damaged, func(id int64) string { return fmt.Sprintf(".effectfence_events WHERE id = %d", id) })
	var u *fence.UnreadableEventError
	if !errors.As(err, &u) || u.ID != damaged[0] {
		t.Errorf("Events of a trail with an unreadable event: %v; want the first one's error", err)
	}
}
