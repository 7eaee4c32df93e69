package postgres

import (
	"context"
	"strings"
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

// TestBriefStoreOpensNoWarmPoolWhateverTheURLSays: docs/postgres.md says the ledger commands
// open no warm pool, one connection for their read. They read the ledger URL the fence's
// processes read (EFFECTFENCE_LEDGER), and a fleet tunes its warm pool there
// (pool_min_conns, pool_min_idle_conns): a brief store keeps none of it.
func TestBriefStoreOpensNoWarmPoolWhateverTheURLSays(t *testing.T) {
	schema := testSchema(t)
	openSchema(t, schema)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, param := range []string{"pool_min_conns=6", "pool_min_idle_conns=6"} {
		u := testURL(t)
		if strings.Contains(u, "?") {
			u += "&"
		} else {
			u += "?"
		}
		u += "pool_max_conns=8&" + param
		s, err := Open(ctx, Config{URL: u, Schema: schema, Existing: true, Brief: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.View(ctx, func(tx fence.Tx) error { _, err := tx.Get("x"); return err }); err != nil {
			s.Close()
			t.Fatal(err)
		}
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if n := s.pool.Stat().TotalConns(); n > 2 {
				s.Close()
				t.Fatalf("with %s in the URL a brief store holds %d connections; want the one it used (no warm pool)", param, n)
			}
		}
		s.Close()
	}
}
