package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// A durable ledger (here a SQLite file; a postgres:// URL opens a shared one): what one
// process committed, the next replays after a restart.
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ledger")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	req := fence.Request{Intent: "charge:order-123", Tool: "charge_card", Args: []byte(`{"amount":4900}`)}
	for run := 1; run <= 2; run++ { // two runs of a program, the ledger closed between them
		led, err := store.Open(ctx, store.Options{Ledger: filepath.Join(dir, "ledger.db")})
		if err != nil {
			panic(err)
		}
		adm, err := led.Prepare(ctx, req)
		switch {
		case err != nil:
			fmt.Println("refused:", fence.CodeOf(err))
		case adm.Cert != nil:
			fmt.Printf("run %d: replayed %s\n", run, adm.Cert.Result)
		default:
			_, err := led.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`))
			fmt.Printf("run %d: charged; commit: %v\n", run, err)
		}
		if err := led.Close(); err != nil {
			panic(err)
		}
	}
	// Output:
	// run 1: charged; commit: <nil>
	// run 2: replayed {"charge":"ch_1"}
}
