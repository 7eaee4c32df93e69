package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestHeartbeatThatFailsKeepsTheTicket: README's quick start says eng.Heartbeat renews a long
// effect's lease, and a holder renews in a loop, tk, err = eng.Heartbeat(ctx, tk), trying
// again when one renewal fails (here: its bound ran out before the ledger answered, on a real
// SQLite file and a real PostgreSQL schema). The ticket it is handed back with the error is
// still its claim's, and its Commit records the effect. Before 2026-12-07 a failed Heartbeat
// returned the zero Ticket: the next renewals and the Commit were refused lease_lost ("no
// claim can have that intent") and the effect's result was recorded nowhere, its claim left
// to go unknown.
func TestHeartbeatThatFailsKeepsTheTicket(t *testing.T) {
	t.Parallel()
	for _, ledger := range []string{"sqlite", "postgres"} {
		t.Run(ledger, func(t *testing.T) {
			t.Parallel()
			loc := filepath.Join(t.TempDir(), "l.db")
			if ledger == "postgres" {
				loc = pgtest.Ledger(t, "hbfail")
			}
			led, err := store.Open(ctx, store.Options{Ledger: loc})
			if err != nil {
				t.Fatal(err)
			}
			defer led.Close()
			eng := led.Engine
			adm, err := eng.Prepare(ctx, fence.Request{Intent: "export:42", Tool: "export", Args: []byte(`{"rows":1000000}`)})
			if err != nil {
				t.Fatal(err)
			}
			tk := *adm.Ticket
			ended, cancel := context.WithCancel(ctx)
			cancel() // a renewal whose bound ran out
			tk, err = eng.Heartbeat(ended, tk)
			if err == nil || errors.Is(err, fence.ErrLeaseLost) {
				t.Fatalf("a heartbeat whose context had ended: %v; want the ledger's error", err)
			}
			if tk.Intent != adm.Ticket.Intent || tk.Token != adm.Ticket.Token || tk.Nonce != adm.Ticket.Nonce {
				t.Errorf("a failed heartbeat handed back ticket %+v; want the claim's own, %+v", tk, *adm.Ticket)
			}
			if tk, err = eng.Heartbeat(ctx, tk); err != nil {
				t.Fatalf("the next renewal: %v", err)
			}
			cert, err := eng.Commit(ctx, tk, []byte(`{"file":"export-42.csv"}`))
			if err != nil || cert == nil {
				t.Fatalf("the commit after a failed renewal: %v; want the effect recorded", err)
			}
			if rec, err := eng.Status(ctx, "export:42"); err != nil || rec.State != fence.StateDone {
				t.Fatalf("recorded: %s %v", rec.State, err)
			}
		})
	}
}
