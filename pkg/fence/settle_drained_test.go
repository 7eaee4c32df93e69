package fence_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

// A release, abort or lost answered as kept in the spool (SpooledError), recorded by a drain,
// then settled again by its holder with the same ticket (docs/serve.md: calling the same tool
// again is safe and, once the ledger answers, returns what is recorded). Before, that report
// was taken for a second one: refused lease_lost ("nothing was recorded") though the ledger
// held it, and kept in the audit trail as a late result.
func TestSettleAgainOfASpooledOutcomeAfterItsDrain(t *testing.T) {
	ctx := context.Background()
	for _, k := range []fence.OutcomeKind{fence.OutcomeRelease, fence.OutcomeAbort, fence.OutcomeLost} {
		t.Run(string(k), func(t *testing.T) {
			ds := &fencetest.DownStore{Store: fence.NewMemoryStore()}
			e := fence.New(ds, fence.Config{SpoolDir: t.TempDir()})
			defer e.Close()
			adm, err := e.Prepare(ctx, fence.Request{Intent: "x", Tool: "t", Args: []byte(`{}`)})
			if err != nil || !adm.Fresh() {
				t.Fatalf("prepare: %+v %v", adm, err)
			}
			o := fence.Outcome{Kind: k, Ticket: *adm.Ticket, Reason: "the call failed"}
			ds.Down.Store(true)
			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err = e.Settle(sctx, o)
			cancel()
			if sp := (fence.SpooledError{}); !errors.As(err, &sp) {
				t.Fatalf("settle with the ledger down: %v; want it spooled", err)
			}
			ds.Down.Store(false)
			if n, err := e.DrainSpool(ctx); n != 1 || err != nil {
				t.Fatalf("drain: %d %v", n, err)
			}
			if _, err := e.Settle(ctx, o); err != nil {
				t.Errorf("the same %s settled again once recorded: %v; want it answered as recorded", k, err)
			}
			_ = ds.View(ctx, func(tx fence.Tx) error {
				return tx.Events("x", func(ev fence.Event) bool {
					if ev.Kind == fence.EventLateResult {
						t.Errorf("audited as a late result: %s", strings.TrimSpace(ev.Reason))
					}
					return true
				})
			})
		})
	}
}
