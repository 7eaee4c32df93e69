package main

import (
	"context"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// waitOneInFlight waits (30 s at most) until the ledger (a SQLite file or a PostgreSQL URL)
// holds exactly one claim in flight, a call admitted, and returns it; logs tells what the
// processes under test said, for the failure.
func waitOneInFlight(t *testing.T, ledger string, logs func() string) fence.Record {
	t.Helper()
	led, err := store.Open(context.Background(), store.Options{Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var held []fence.Record
		err := led.Store().View(context.Background(), func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight}}, func(r *fence.Record) bool { held = append(held, *r); return true })
		})
		if err == nil && len(held) == 1 {
			return held[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call was not admitted: %d in flight (%v)\n%s", len(held), err, logs())
		}
	}
}
