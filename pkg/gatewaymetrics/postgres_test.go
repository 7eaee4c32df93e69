package gatewaymetrics_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/gatewaymetrics"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerTotalsSpanReplicas: two gateway replicas on one PostgreSQL ledger. What one of them
// did shows in the other's ledger totals, while each one's own counters stay its own.
func TestLedgerTotalsSpanReplicas(t *testing.T) {
	url := pgtest.Ledger(t, "gatewaymetrics")
	t.Setenv("XDG_STATE_HOME", t.TempDir()) // the outcome spool of both replicas
	ctx := context.Background()
	open := func() *store.Ledger {
		t.Helper()
		led, err := store.Open(ctx, store.Options{Ledger: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { led.Close() })
		return led
	}
	a, b := open(), open()
	req := fence.Request{Intent: "wrap:charge:metrics", Tool: "charge", Args: json.RawMessage(`{"amount":1}`), Agent: "replica-a"}
	adm, err := a.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("replica a was not admitted: %+v %v", adm, err)
	}
	if _, err := a.Commit(ctx, *adm.Ticket, json.RawMessage(`{"content":[],"isError":false}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	m := gatewaymetrics.New()
	m.WatchEngine(b.Engine)
	got := scrape(t, m)
	if got[`effectfence_ledger_attempts_total{result="admitted"}`] != 1 || got[`effectfence_fence_attempts_total{result="admitted"}`] != 0 || got["effectfence_ledger_up"] != 1 {
		t.Fatalf("replica b should see a's admission in the ledger totals only: %v", series(got, "effectfence_"))
	}

	req.Agent = "replica-b"
	if adm, err := b.Prepare(ctx, req); err != nil || adm.Fresh() {
		t.Fatalf("replica b should replay a's result: %+v %v", adm, err)
	}
	got = scrape(t, m)
	if got[`effectfence_fence_attempts_total{result="replayed"}`] != 1 || got[`effectfence_ledger_attempts_total{result="replayed"}`] != 1 {
		t.Fatalf("b's replay (not yet flushed) missing: %v", series(got, "effectfence_"))
	}
}
