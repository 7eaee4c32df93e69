package store_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestEngineCloseStopsTheLedgersBackground: README's library quick start keeps the engine of
// an opened ledger (led, _ := store.Open(ctx, opts); eng := led.Engine), and a user closes
// what they kept: eng.Close(). The ledger's background sweep and recovery then stop with it,
// on a real SQLite file and a real PostgreSQL schema. Before 2026-12-07 they went on for the
// life of the process against the closed store, two goroutines per open (a service opening a
// ledger per tenant or per job leaked them without bound), each tick failing and, with
// Options.Log set, logging "background recovery ... failed ...: store is closed".
func TestEngineCloseStopsTheLedgersBackground(t *testing.T) {
	t.Parallel()
	for _, ledger := range []string{"sqlite", "postgres"} {
		t.Run(ledger, func(t *testing.T) {
			loc := filepath.Join(t.TempDir(), "l.db")
			if ledger == "postgres" {
				loc = pgtest.Ledger(t, "engclose")
			}
			var log syncbuf.Buffer
			// Recovery every millisecond: the goroutine that outlived the store failed at once.
			led, err := store.Open(ctx, store.Options{Ledger: loc, RecoverEvery: time.Millisecond, SweepEvery: time.Millisecond, Log: &log})
			if err != nil {
				t.Fatal(err)
			}
			eng := led.Engine
			if err := eng.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-led.Background():
			case <-time.After(30 * time.Second):
				t.Fatalf("the ledger's background sweep and recovery still run 30 s after its engine was closed; it logged:\n%s", log.String())
			}
			if s := log.String(); strings.Contains(s, "failed") {
				t.Errorf("the background work failed against the closed store:\n%s", s)
			}
			// Closing the ledger as well is harmless (the store answers that it is closed).
			_ = led.Close()
		})
	}
}
