package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A brief store (the ledger commands') keeps no warm pool: after its one read it holds the one
// connection that read used, where a fence's store opens 8 at once (pool_min_conns). A
// one-shot `effectfence ledger ls` holding 8 of the server's connections made a busy server
// refuse other clients ("too many clients already", seen in CI beside wraps writing).
func TestBriefStoreOpensNoWarmPool(t *testing.T) {
	schema := testSchema(t)
	openSchema(t, schema) // the ledger, made by a fence
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, Existing: true, Brief: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.View(ctx, func(tx fence.Tx) error { _, err := tx.Get("x"); return err }); err != nil {
		t.Fatal(err)
	}
	// A warm pool fills in the background at once: give it three seconds to show.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n := s.pool.Stat().TotalConns(); n > 2 {
			t.Fatalf("a brief store holds %d connections; want the one it used (no warm pool)", n)
		}
	}
	if m := s.pool.Config().MinConns; m != 0 {
		t.Fatalf("a brief store's pool keeps %d connections at least; want 0", m)
	}
}
