package postgres

import (
	"context"
	"strings"
	"testing"
)

// A ledger whose effectfence_version row records a version below 0 (edited or damaged) is
// refused at open, naming it. Before, the open indexed its migrations with it and panicked
// (index out of range), crashing every process that opened the ledger, `ledger ls` included.
func TestSchemaVersionThatNoLedgerHasIsRefused(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	s := openSchema(t, schema)
	if _, err := s.pool.Exec(ctx, "UPDATE effectfence_version SET version = -1"); err != nil {
		t.Fatal(err)
	}
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("open of a ledger of schema version -1 panicked: %v", p)
			}
		}()
		o, err := Open(ctx, Config{URL: testURL(t), Schema: schema})
		if err == nil {
			o.Close()
		}
		return err
	}()
	if err == nil || !strings.Contains(err.Error(), "version -1") {
		t.Fatalf("open of a ledger of schema version -1 = %v; want it refused, naming the version", err)
	}
	var v int
	if err := s.pool.QueryRow(ctx, "SELECT version FROM effectfence_version").Scan(&v); err != nil || v != -1 {
		t.Fatalf("the version row after the refused open: %d, %v; want it left as it was", v, err)
	}
}
