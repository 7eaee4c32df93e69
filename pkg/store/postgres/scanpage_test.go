package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestScanHoldsOnePage: a Scan or Events without a Limit (what `ledger ls`, `verify`, `stats`
// and `export` read through) holds at most a page of rows at once, whatever the ledger's size,
// and still delivers every record in intent order and every event oldest first, from the one
// snapshot of its View: a record written or removed by another connection while the scan is
// between pages is not seen. Before, Scan and Events read every row of the query before the
// first was used, so a huge ledger was held whole in memory.
func TestScanHoldsOnePage(t *testing.T) {
	ctx := context.Background()
	schema := testSchema(t)
	s := openSchema(t, schema)
	const page, n, nev = 5, 53, 23
	s.scanPage = page
	var intents []string
	err := s.Update(ctx, func(tx fence.Tx) error {
		for i := range n {
			r := &fence.Record{Intent: fmt.Sprintf("r:%03d", i), State: fence.StateFailed, Tool: "t", Args: []byte(`{}`), UpdatedAt: tx.Now()}
			if err := tx.Put(r); err != nil {
				return err
			}
			intents = append(intents, r.Intent)
		}
		for i := range nev {
			if err := tx.AppendEvent(fence.Event{At: tx.Now(), Intent: "r:000", Kind: fence.EventClear, Who: "tester", Reason: fmt.Sprint(i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	s.rowsHeld = func(k int) { most = max(most, k) }

	for _, write := range []bool{false, true} {
		run := s.View
		if write {
			run = s.Update
		}
		most = 0
		var got []string
		var reasons []string
		err := run(ctx, func(tx fence.Tx) error {
			got, reasons = got[:0], reasons[:0]
			err := tx.Scan(fence.Filter{}, func(r *fence.Record) bool {
				got = append(got, r.Intent)
				if len(got) == page+1 && !write {
					// Between pages, another connection adds a record, removes one not yet
					// delivered, and adds an event: the View's snapshot has none of that.
					err := s.Update(ctx, func(w fence.Tx) error {
						if err := w.Put(&fence.Record{Intent: "r:0205", State: fence.StateFailed, Tool: "t", Args: []byte(`{}`), UpdatedAt: w.Now()}); err != nil {
							return err
						}
						if err := w.Delete("r:040"); err != nil {
							return err
						}
						return w.AppendEvent(fence.Event{At: w.Now(), Intent: "r:000", Kind: fence.EventClear, Who: "tester", Reason: "late"})
					})
					if err != nil {
						t.Errorf("changing the ledger under the scan: %v", err)
					}
				}
				return true
			})
			if err != nil {
				return err
			}
			return tx.Events("", func(ev fence.Event) bool {
				reasons = append(reasons, ev.Reason)
				return true
			})
		})
		if err != nil {
			t.Fatalf("write=%v: %v", write, err)
		}
		want := intents
		if write { // the Update sees what the View's scan let the other connection change
			want = slices.DeleteFunc(slices.Clone(intents), func(s string) bool { return s == "r:040" })
			want = slices.Insert(want, 21, "r:0205")
		}
		if !slices.Equal(got, want) {
			t.Errorf("write=%v: scanned %d records %v, want %d %v", write, len(got), got, len(want), want)
		}
		wantEvents := nev
		if write {
			wantEvents++
		}
		if len(reasons) != wantEvents || reasons[0] != "0" || reasons[nev-1] != fmt.Sprint(nev-1) {
			t.Errorf("write=%v: events %v, want %d oldest first", write, reasons, wantEvents)
		}
		if most == 0 || most > page {
			t.Errorf("write=%v: a scan held %d rows at once; pages are %d", write, most, page)
		}
	}
}

// TestScanCutBetweenPages: the connection of a View is terminated (pg_terminate_backend)
// while its Scan delivers its first page: the Scan delivers at most what it held (one page)
// and fails with the connection lost, so a view reading through it (`ledger export`) reports
// itself incomplete. Before, every row had been read before the first was delivered, and the
// cut went unseen until the end.
func TestScanCutBetweenPages(t *testing.T) {
	ctx := context.Background()
	schema := testSchema(t)
	s := openSchema(t, schema)
	const page, n = 4, 40
	s.scanPage = page
	err := s.Update(ctx, func(tx fence.Tx) error {
		for i := range n {
			if err := tx.Put(&fence.Record{Intent: fmt.Sprintf("c:%03d", i), State: fence.StateUnknown, Tool: "t", Args: []byte(`{}`), UpdatedAt: tx.Now()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	other := admin(t, "")
	delivered := 0
	err = s.View(ctx, func(ftx fence.Tx) error {
		pid := ftx.(*tx).pid
		return ftx.Scan(fence.Filter{}, func(*fence.Record) bool {
			delivered++
			if delivered == 1 {
				if _, err := other.Exec(ctx, "SELECT pg_terminate_backend($1)", int64(pid)); err != nil {
					t.Errorf("terminating the view's backend: %v", err)
				}
				waitGone(t, other, pid)
			}
			return true
		})
	})
	var lost ConnLostError
	if !errors.As(err, &lost) {
		t.Errorf("a scan whose connection was cut returned %v, want the connection lost", err)
	}
	if delivered > page {
		t.Errorf("the scan delivered %d of %d records after its connection was cut at the first; it held more than a page (%d)", delivered, n, page)
	}
}

// waitGone waits until the backend pid has left pg_stat_activity.
func waitGone(t *testing.T, conn *pgx.Conn, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		var left int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int64(pid)).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // polling the server's own view until the backend is gone
	}
}
