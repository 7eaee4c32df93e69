//go:build unix

package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgcluster"
)

// TestCallsRightAfterAServerRestart: docs/postgres.md, "The next call reconnects", against a
// real restart (a private cluster killed with SIGKILL and started again: crash recovery) of a
// server whose store has been working, so its fresh claims and its commits are one statement
// each (spec.go). After the restart every connection the pool holds is dead. The first calls
// must be admitted, committed and replayed as before; none may be refused as a ledger failure
// that "may or may not" have recorded the claim. Before, a fresh claim sent on a dead
// connection was settled on another pooled connection, dead too, and refused so
// (CommitUnknownError): the first call after every restart failed, with a message saying its
// intent might be held until its lease lapsed.
func TestCallsRightAfterAServerRestart(t *testing.T) {
	c := pgcluster.New(t)
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: c.URL("postgres", "search_path=ledger"), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := fence.New(s, fence.Config{})
	call := func(intent string) (*fence.Ticket, error) {
		adm, err := e.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"usd":1}`)})
		if err != nil {
			return nil, err
		}
		if !adm.Fresh() {
			return nil, fmt.Errorf("%s: not fresh: %+v", intent, adm)
		}
		return adm.Ticket, nil
	}
	for i := range 6 { // the pool's connections all used, the store's clock known
		tk, err := call(fmt.Sprintf("warm-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Commit(ctx, *tk, []byte(`"ok"`)); err != nil {
			t.Fatal(err)
		}
	}
	held, err := call("held") // admitted before the restart, committed after it
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		c.Crash()
		c.Start()
		tk, err := call(fmt.Sprintf("after-%d", round))
		if err != nil {
			t.Fatalf("round %d: the first call after the server restarted: %v", round, err)
		}
		if _, err := e.Commit(ctx, *tk, []byte(`"ok"`)); err != nil {
			t.Fatalf("round %d: its commit: %v", round, err)
		}
		if round == 0 {
			c.Crash()
			c.Start()
			if _, err := e.Commit(ctx, *held, []byte(`"held"`)); err != nil {
				t.Fatalf("a commit right after the server restarted: %v", err)
			}
		}
	}
	for _, intent := range []string{"warm-0", "held", "after-0", "after-2"} {
		adm, err := e.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"usd":1}`)})
		if err != nil || adm.Cert == nil {
			t.Fatalf("duplicate of %s: %+v %v", intent, adm, err)
		}
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var cs fence.Counters
	if err := s.View(ctx, func(tx fence.Tx) (err error) { cs, err = tx.Counters(); return err }); err != nil {
		t.Fatal(err)
	}
	if cs.Admitted != 10 || cs.Replayed != 4 {
		t.Fatalf("counters %+v, want 10 admitted and 4 replayed", cs)
	}
}
