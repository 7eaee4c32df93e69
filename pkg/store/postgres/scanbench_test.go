package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// BenchmarkViewScan: a View's Scan of every record of a 20k-record ledger (what `ledger
// stats` reads), through the cursor Scan reads by (the server sorts by intent COLLATE "C").
func BenchmarkViewScan(b *testing.B) {
	ctx := context.Background()
	s := openSchema(b, testSchema(b))
	const n = 20000
	for from := 0; from < n; from += 500 { // an intent lock each: a few hundred per transaction
		err := s.Update(ctx, func(tx fence.Tx) error {
			for i := from; i < from+500; i++ {
				if err := tx.Put(&fence.Record{Intent: fmt.Sprintf("b:%06d", (i*7919)%n), State: fence.StateFailed, Tool: "t", Args: []byte(`{"k":"v"}`), UpdatedAt: tx.Now()}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		seen := 0
		if err := s.View(ctx, func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{}, func(*fence.Record) bool { seen++; return true })
		}); err != nil || seen != n {
			b.Fatalf("scanned %d of %d: %v", seen, n, err)
		}
	}
}
