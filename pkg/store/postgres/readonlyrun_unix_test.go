//go:build unix

package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgcluster"
)

// readOnlyEverywhere sets the server's default_transaction_read_only (ALTER SYSTEM on the
// test's private cluster, then a reload, as a failover tool fencing off an old primary does)
// and waits until every connection of s's pool has taken it.
func readOnlyEverywhere(t *testing.T, c *pgcluster.Cluster, s *Store, on bool) {
	t.Helper()
	want := "off"
	if on {
		want = "on"
		c.Exec("postgres", "ALTER SYSTEM SET default_transaction_read_only = on")
	} else {
		c.Exec("postgres", "ALTER SYSTEM RESET default_transaction_read_only")
	}
	c.Exec("postgres", "SELECT pg_reload_conf()")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		// Every connection the pool may hold, held at once so that each is asked.
		n := int(s.pool.Stat().MaxConns())
		seen := 0
		var held []*pgxpool.Conn
		for range n {
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, conn)
			var got string
			if err := conn.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got == want {
				seen++
			}
		}
		for _, conn := range held {
			conn.Release()
		}
		if seen == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pool's connections did not all take default_transaction_read_only = %s", want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestServerTurnsReadOnlyWhileRunning holds docs/postgres.md's "A server that turns read-only
// while a process runs refuses its claims (store_error, not run) and its outcomes wait in the
// spool": a running store whose server is made read-only (default_transaction_read_only on,
// reloaded into every session) refuses a fresh claim, the one-statement path and the
// transaction alike, with store_error and nothing recorded; a claim admitted before has its
// outcome spooled by Settle; once the server takes writes again the spool drains into one
// recorded outcome, the duplicate is replayed, the refused intent is free and is admitted
// once, and the counters count each admission once.
func TestServerTurnsReadOnlyWhileRunning(t *testing.T) {
	t.Parallel()
	c := pgcluster.New(t)
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: c.URL("postgres", "search_path=ledger"), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	spool := t.TempDir()
	e := fence.New(s, fence.Config{Owner: "host-a/1/1", LeaseTTL: time.Minute, SpoolDir: spool})
	// A first claim reads the server's clock, so the next fresh claim is tried as one
	// statement (spec.go) before its transaction.
	running := fence.Request{Intent: "ro:running", Tool: "charge", Args: []byte(`{"usd":1}`)}
	adm, err := e.Prepare(ctx, running)
	if err != nil || !adm.Fresh() {
		t.Fatalf("claim before: %+v %v", adm, err)
	}

	readOnlyEverywhere(t, c, s, true)
	for _, speculate := range []bool{true, false} {
		s.noFreshSpeculation.Store(!speculate)
		r := fence.Request{Intent: "ro:refused", Tool: "charge", Args: []byte(`{"usd":2}`)}
		got, err := e.Prepare(ctx, r)
		if err == nil || got.Fresh() || fence.CodeOf(err) != fence.CodeStore {
			t.Fatalf("a claim on a read-only server (speculate %v): %+v %v, want store_error and no ticket", speculate, got, err)
		}
	}
	s.noFreshSpeculation.Store(false)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = e.Settle(short, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"charged"`)})
	cancel()
	var sp fence.SpooledError
	if !errors.As(err, &sp) {
		t.Fatalf("settle on a read-only server: %v, want it spooled", err)
	}

	readOnlyEverywhere(t, c, s, false)
	if n, err := e.DrainSpool(ctx); err != nil || n != 1 {
		t.Fatalf("drain once writable: %d %v", n, err)
	}
	if files, _ := fence.SpoolFiles(spool); len(files) != 0 {
		t.Fatalf("spool not emptied: %v", files)
	}
	other := fence.New(s, fence.Config{Owner: "host-b/1/1"})
	if got, err := other.Prepare(ctx, running); err != nil || got.Fresh() || got.Cert == nil {
		t.Fatalf("duplicate of the spooled commit: %+v %v, want a replay", got, err)
	}
	if st, err := e.Status(ctx, "ro:refused"); err != nil || st.State != fence.StateNone {
		t.Fatalf("the refused claim: %+v %v, want no record", st, err)
	}
	if got, err := other.Prepare(ctx, fence.Request{Intent: "ro:refused", Tool: "charge", Args: []byte(`{"usd":2}`)}); err != nil || !got.Fresh() {
		t.Fatalf("the refused claim once writable: %+v %v, want it admitted", got, err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var cs fence.Counters
	if err := s.View(ctx, func(tx fence.Tx) error {
		var err error
		cs, err = tx.Counters()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if cs.Admitted != 2 || cs.Replayed != 1 {
		t.Fatalf("counters %+v: want 2 admitted (before, and the refused one after), 1 replayed", cs)
	}
}
