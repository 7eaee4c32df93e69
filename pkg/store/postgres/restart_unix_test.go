//go:build unix

package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	t.Parallel()
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

// TestWaiterAcrossAServerRestart: a duplicate in another process waits (PrepareWait, woken by
// LISTEN/NOTIFY) for a call in flight when the server is killed and restarted. The waiters
// table is UNLOGGED, so crash recovery empties it, and the LISTEN connection dies: the
// listener must reconnect, wake its waiters so they ask again and register anew, so that the
// holder's commit after the restart notifies them. The waiter is answered with the holder's
// result (coalesced), never admitted to run the call itself; or, if its safety-net read met
// the server down, refused with a store error, and its retry gets the result.
func TestWaiterAcrossAServerRestart(t *testing.T) {
	t.Parallel()
	c := pgcluster.New(t)
	ctx := context.Background()
	open := func() *Store {
		s, err := Open(ctx, Config{URL: c.URL("postgres", "search_path=ledger"), MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	holder, waiter := fence.New(keepOpen{open()}, fence.Config{LeaseTTL: time.Minute}), open()
	w := fence.New(keepOpen{waiter}, fence.Config{LeaseTTL: time.Minute})
	r := fence.Request{Intent: "charge-1", Tool: "charge", Args: []byte(`{"usd":5}`)}
	adm, err := holder.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	type result struct {
		adm fence.Admission
		err error
	}
	waited := make(chan result, 1)
	go func() { adm, err := w.PrepareWait(ctx, r, time.Minute); waited <- result{adm, err} }()
	registered := func() bool {
		return len(c.Query("postgres", "SELECT listener FROM ledger.effectfence_waiters WHERE intent = $1 AND listener = $2", r.Intent, waiter.instance)) == 1
	}
	waitUntil(t, "the waiter to register", registered)
	before := waiter.listener.pid.Load()
	c.Crash()
	c.Start()
	if len(c.Query("postgres", "SELECT listener FROM ledger.effectfence_waiters")) != 0 {
		t.Log("the waiters table kept its rows through crash recovery")
	}
	// The waiter reads the ledger every second as a safety net; a read that meets the server
	// still down ends its wait with a store error (refused, nothing runs), which a slow
	// restart makes likely. Either it registers again, or it was refused so.
	var refused *result
	waitUntil(t, "the waiter to register again after the restart, or to be refused", func() bool {
		if waiter.listener.pid.Load() == before {
			return false // the listener has not reconnected yet
		}
		if registered() {
			return true
		}
		select {
		case got := <-waited:
			refused = &got
			return true
		default:
			return false
		}
	})
	if refused != nil {
		if refused.err == nil || fence.CodeOf(refused.err) != fence.CodeStore {
			t.Fatalf("the waiter ended during the restart with %+v %v; want a store error", refused.adm, refused.err)
		}
		t.Logf("the waiter met the server down and was refused (%v); its retry waits", refused.err)
		go func() { adm, err := w.PrepareWait(ctx, r, time.Minute); waited <- result{adm, err} }()
		waitUntil(t, "the retry to register", registered)
	}
	cert, err := holder.Commit(ctx, *adm.Ticket, []byte(`"ch_1"`))
	if err != nil {
		t.Fatalf("the holder's commit after the restart: %v", err)
	}
	got := <-waited
	if got.err != nil || got.adm.Fresh() || got.adm.Cert == nil || got.adm.Cert.Hash != cert.Hash {
		t.Fatalf("the waiter across the restart: %+v %v; want the holder's cert %s", got.adm, got.err, cert.Hash)
	}
}
