package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/postgres"
)

// TestClearAndResolveNameTheLedgerTheyChanged: an operator with several ledgers (a wrap's per
// server, serve's, a PostgreSQL one) must see in clear's and resolve's text which one was
// changed, as --json has said (`ledger`). Before, the text named the intent, its state, who
// and why, and no ledger. On a SQLite file and a PostgreSQL ledger (named redacted).
func TestClearAndResolveNameTheLedgerTheyChanged(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ledger := filepath.Join(t.TempDir(), "ledger.db")
			shown := ledger
			if kind == "postgres" {
				ledger = pgLedger(t)
				shown = postgres.Redact(ledger)
			}
			fenceIntents(t, ledger, "charge:c-1", "charge:c-2")
			env := []string{store.EnvLedger + "=", "NO_COLOR=1"}
			r := runBinary(t, env, "", "ledger", "clear", "charge:c-1", "--reason", "checked", "--ledger", ledger)
			if r.code != 0 || !strings.Contains(r.stdout, "cleared charge:c-1 (was unknown) in ledger "+shown+" by ") {
				t.Errorf("ledger clear: exit %d; want the ledger named (%s)\n%s%s", r.code, shown, r.stdout, r.stderr)
			}
			r = runBinary(t, env, "", "ledger", "resolve", "charge:c-2", "--did-not-happen", "--reason", "checked", "--ledger", ledger)
			if r.code != 0 || !strings.Contains(r.stdout, "resolved charge:c-2 (was unknown) as did_not_happen in ledger "+shown+" by ") {
				t.Errorf("ledger resolve: exit %d; want the ledger named (%s)\n%s%s", r.code, shown, r.stdout, r.stderr)
			}
		})
	}
}
