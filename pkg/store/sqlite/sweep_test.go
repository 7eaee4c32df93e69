package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestSweepDecodesNoRecord: a sweep deletes its batches without reading the records: Scan
// decoded every expired outcome (a result may be 64 KB) only to learn its intent.
func TestSweepDecodesNoRecord(t *testing.T) {
	ctx := context.Background()
	_, eng := newLedger(t)
	st := eng.Store()
	const expired = 2500
	result := []byte(`"` + strings.Repeat("r", 4096) + `"`)
	for i := 0; i < expired; i += 1000 {
		err := st.Update(ctx, func(tx fence.Tx) error {
			now := tx.Now()
			for j := i; j < min(i+1000, expired); j++ {
				intent := fmt.Sprintf("old:%05d", j)
				err := tx.Put(&fence.Record{Intent: intent, State: fence.StateDone, Tool: "t", Args: []byte("null"), ClaimedAt: now, UpdatedAt: now,
					ExpiresAt: now.Add(-time.Minute - time.Duration(j%97)*time.Millisecond),
					Cert:      &fence.Cert{Intent: intent, Tool: "t", Args: []byte("null"), Result: result, Hash: "h-" + intent}})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	decoded := 0
	SetTestHookDecoded(func(string) { decoded++ })
	defer SetTestHookDecoded(nil)
	n, err := eng.Sweep(ctx)
	if err != nil || n != expired {
		t.Fatalf("swept %d, %v; want %d", n, err, expired)
	}
	if decoded != 0 {
		t.Fatalf("sweeping %d expired outcomes decoded %d records; want none", expired, decoded)
	}
}

// TestSweepStatementUsesTheExpiryIndex: SweepExpired's statement finds its records in
// records_life, in its order, without sorting every expired record.
func TestSweepStatementUsesTheExpiryIndex(t *testing.T) {
	path, eng := newLedger(t)
	eng.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := queryPlan(t, db, qSweepExpired, time.Now().UnixNano(), 1000)
	if !strings.Contains(p, "INDEX records_life (state=? AND expires_at>? AND expires_at<?)") || strings.Contains(p, "TEMP B-TREE") {
		t.Fatalf("plan %q: want records_life in its order, no sort", p)
	}
	t.Logf("plan: %q", p)
}
