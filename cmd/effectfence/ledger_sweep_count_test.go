package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerSweepCountsWhatItSwept: `effectfence ledger sweep` reports how many expired
// outcomes it dropped. Opening the ledger already sweeps them (docs/ledger.md), and the
// command's own sweep then found none: it said "swept 0" while it had deleted the expired
// outcome (a done record's arguments and result, as docs/privacy.md's retention table says).
func TestLedgerSweepCountsWhatItSwept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path, ResultTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, intent := range []string{"charge:1", "charge:2"} {
		adm, err := l.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"card":"4111"}`)})
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare %s: %+v %v", intent, adm, err)
		}
		if _, err := l.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // both outcomes expire (their expiry is in the record)

	var swept struct {
		Swept *int
	}
	code, out, errOut := runCLI(t, "", "ledger", "sweep", "--ledger", path, "--json")
	if code != exitOK || json.Unmarshal([]byte(out), &swept) != nil || swept.Swept == nil || *swept.Swept != 2 {
		t.Fatalf("ledger sweep = %d %s %s; want 2 swept", code, out, errOut)
	}
	code, out, _ = runCLI(t, "", "ledger", "export", "--ledger", path)
	if code != exitOK || out != "" {
		t.Fatalf("after the sweep the ledger holds: %d %s", code, out)
	}
}
