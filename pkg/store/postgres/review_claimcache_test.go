package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// claimCacheAgrees fails the test if an entry of s's claim cache holds a record that is not
// what decoding its bytes gives (a record changed by whoever got it from a Get).
func claimCacheAgrees(t *testing.T, s *Store, when string) int {
	t.Helper()
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	n := 0
	for intent, c := range s.claims.m {
		if c.rec == nil {
			continue
		}
		n++
		want := &fence.Record{}
		if err := json.Unmarshal(c.body, want); err != nil {
			t.Fatalf("%s: %s: %v", when, intent, err)
		}
		if !reflect.DeepEqual(c.rec, want) {
			t.Fatalf("%s: the remembered record of %s\n%+v\nis not what its bytes decode to\n%+v", when, intent, c.rec, want)
		}
	}
	return n
}

// TestRememberedClaimStaysWhatItsBytesSay: every engine call that reads a claim this store
// remembers (a duplicate, a heartbeat, an abort, a release, a clear, a resolve, a commit,
// a takeover by another process, a clear and a new claim), alone and concurrently (heartbeats
// from several goroutines, which share the remembered record), leaves the
// remembered record equal to what decoding the remembered bytes gives; -race sees any write to
// the record the callers share; and every outcome is the one the transaction path gives.
func TestRememberedClaimStaysWhatItsBytesSay(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	const lease = time.Second // long enough for the calls before each sleep on a loaded machine
	sa, sb := openSchema(t, schema), openSchema(t, schema)
	a := fence.New(sa, fence.Config{LeaseTTL: lease, Owner: "host-a/1/1"})
	b := fence.New(sb, fence.Config{LeaseTTL: lease, Owner: "host-b/1/1"})
	req := func(intent string) fence.Request {
		return fence.Request{Intent: intent, Tool: "charge", Args: json.RawMessage(`{"amount":7,"note":"<&>\u00e9"}`),
			Agent: "billing", Clock: fence.VectorClock{"audit": 2}, ReadSet: nil, Redact: []string{"note"}}
	}
	prepare := func(e *fence.Engine, intent string) fence.Ticket {
		t.Helper()
		adm, err := e.Prepare(ctx, req(intent))
		if err != nil || !adm.Fresh() {
			t.Fatalf("%s: %+v %v", intent, adm, err)
		}
		return *adm.Ticket
	}

	// Alone: each call reads the remembered claim in a one-statement attempt first.
	tk := prepare(a, "cc:1")
	if claimCacheAgrees(t, sa, "claimed") != 1 {
		t.Fatal("the claim was not remembered with its record")
	}
	var inflight fence.InFlightError
	if _, err := a.Prepare(ctx, req("cc:1")); !errors.As(err, &inflight) {
		t.Fatalf("duplicate: %v", err)
	}
	claimCacheAgrees(t, sa, "duplicate")
	tk2, err := a.Heartbeat(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	claimCacheAgrees(t, sa, "heartbeat")
	if _, err := a.Heartbeat(ctx, fence.Ticket{Intent: tk.Intent, Token: tk.Token, Nonce: "not-it"}); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("a stranger's heartbeat: %v", err)
	}
	claimCacheAgrees(t, sa, "a stranger's heartbeat")
	cert, err := a.Commit(ctx, tk2, json.RawMessage(`{"ok":1}`))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := b.Status(ctx, "cc:1")
	if err != nil || rec.State != fence.StateDone || rec.Cert.Hash != cert.Hash || !rec.LeaseUntil.Equal(tk2.LeaseUntil) {
		t.Fatalf("recorded %+v %v; want done with cert %s and the heartbeat's lease %v", rec, err, cert.Hash, tk2.LeaseUntil)
	}

	tk = prepare(a, "cc:2")
	if err := a.Abort(ctx, tk, "unsure"); err != nil {
		t.Fatal(err)
	}
	claimCacheAgrees(t, sa, "abort")
	tk = prepare(a, "cc:3")
	if err := a.Release(ctx, tk, "not needed"); err != nil {
		t.Fatal(err)
	}
	claimCacheAgrees(t, sa, "release")

	// Cleared and claimed again by this store: the first claim's commit is refused, the new
	// claim's stands.
	old := prepare(a, "cc:4")
	if _, err := a.Clear(ctx, "cc:4", "op", "checked"); err != nil {
		t.Fatal(err)
	}
	claimCacheAgrees(t, sa, "clear")
	tk = prepare(a, "cc:4")
	if _, err := a.Commit(ctx, old, json.RawMessage(`{"who":"old"}`)); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("the cleared claim's commit: %v", err)
	}
	claimCacheAgrees(t, sa, "cleared claim's commit")
	if _, err := a.Commit(ctx, tk, json.RawMessage(`{"who":"new"}`)); err != nil {
		t.Fatal(err)
	}
	if rec, err := b.Status(ctx, "cc:4"); err != nil || rec.Token != tk.Token || string(rec.Cert.Result) != `{"who":"new"}` {
		t.Fatalf("recorded %+v %v", rec, err)
	}

	// Taken over by another process after the lease lapsed: A's remembered claim is stale.
	r5 := req("cc:5")
	r5.RerunSafe = true
	admA, err := a.Prepare(ctx, r5)
	if err != nil || !admA.Fresh() {
		t.Fatal(admA, err)
	}
	time.Sleep(2 * lease)
	admB, err := b.Prepare(ctx, r5)
	if err != nil || !admB.Fresh() {
		t.Fatal(admB, err)
	}
	if _, err := a.Heartbeat(ctx, *admA.Ticket); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("A's heartbeat after the takeover: %v", err)
	}
	if _, err := a.Commit(ctx, *admA.Ticket, json.RawMessage(`{"who":"A"}`)); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("A's commit after the takeover: %v", err)
	}
	claimCacheAgrees(t, sa, "takeover")
	if _, err := b.Commit(ctx, *admB.Ticket, json.RawMessage(`{"who":"B"}`)); err != nil {
		t.Fatal(err)
	}
	if rec, err := a.Status(ctx, "cc:5"); err != nil || rec.Token != admB.Ticket.Token || string(rec.Cert.Result) != `{"who":"B"}` {
		t.Fatalf("recorded %+v %v", rec, err)
	}

	// Lapsed and resolved by an operator as happened.
	tk = prepare(a, "cc:6")
	time.Sleep(2 * lease)
	res, err := a.Resolve(ctx, fence.ResolveRequest{Intent: "cc:6", How: fence.Happened, Reason: "saw it", Who: "op"})
	if err != nil || res.Cert == nil {
		t.Fatal(res, err)
	}
	claimCacheAgrees(t, sa, "resolve")

	// Concurrently: the holder's heartbeats from several goroutines, then its commit, all
	// read the one remembered record (a duplicate of an intent this engine knows goes to a
	// read-only transaction instead).
	const intents = 8
	var wg sync.WaitGroup
	errs := make(chan error, 64*intents)
	for i := range intents {
		intent := fmt.Sprintf("cc:c%d", i)
		tk := prepare(a, intent)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var beats sync.WaitGroup
			for range 4 {
				beats.Add(1)
				go func() {
					defer beats.Done()
					for range 3 {
						if _, err := a.Heartbeat(ctx, tk); err != nil {
							errs <- fmt.Errorf("%s: heartbeat: %w", intent, err)
						}
					}
				}()
			}
			beats.Wait()
			if _, err := a.Commit(ctx, tk, json.RawMessage(`{"ok":true}`)); err != nil {
				errs <- fmt.Errorf("%s: commit: %w", intent, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	claimCacheAgrees(t, sa, "concurrent")
	for i := range intents {
		if rec, err := b.Status(ctx, fmt.Sprintf("cc:c%d", i)); err != nil || rec.State != fence.StateDone {
			t.Errorf("cc:c%d: %+v %v", i, rec, err)
		}
	}
}
