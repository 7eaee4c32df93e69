package postgres

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// landedStallPG is a PostgreSQL store whose next Update, once stall is set, is carried out
// whatever its context and then waits for gate before it returns: a claim that landed and
// whose answer does not come back in time.
type landedStallPG struct {
	*Store
	stall   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func (s *landedStallPG) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if !s.stall.CompareAndSwap(true, false) {
		return s.Store.Update(ctx, fn)
	}
	err := s.Store.Update(context.WithoutCancel(ctx), fn)
	close(s.entered)
	<-s.gate
	return err
}

func (s *landedStallPG) open() { s.once.Do(func() { close(s.gate) }) }

// Close leaves the store open for the next engine.
func (s *landedStallPG) Close() error { return nil }

// TestClaimGivenUpOnPostgresIsReleasedOnce: on PostgreSQL (a one-statement claim, its token
// drawn as it is written), a claim given up that landed is released by the retry that meets
// it, and the retry admitted; a drain of another process meanwhile, and the claim's write
// returning later, release nothing more; the counters count each decision once.
func TestClaimGivenUpOnPostgresIsReleasedOnce(t *testing.T) {
	s := &landedStallPG{Store: newTestStore(t), entered: make(chan struct{}), gate: make(chan struct{})}
	defer s.open()
	spool := t.TempDir()
	live := func(string) fence.Liveness { return fence.Alive }
	e := fence.New(s, fence.Config{LeaseTTL: time.Minute, Owner: "first", Liveness: live, SpoolDir: spool})
	defer e.Close()
	ctx := context.Background()

	warm := fence.Request{Intent: "warm", Tool: "charge", Args: []byte(`{}`)}
	adm, err := e.Prepare(ctx, warm)
	if err != nil || !adm.Fresh() {
		t.Fatalf("warm: %+v, %v", adm, err)
	}
	if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}

	req := fence.Request{Intent: "charge", Tool: "charge", Args: []byte(`{"n":1}`)}
	s.stall.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	adm, _, err = e.PrepareWaitBeside(cctx, req, 0, nil, 100*time.Millisecond, "given up: never sent")
	cancel()
	if !errors.Is(err, fence.ErrClaimStuck) || adm.Ticket != nil {
		t.Fatalf("given up: %+v, %v; want ErrClaimStuck", adm, err)
	}
	<-s.entered
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := fence.SpoolFiles(spool); len(n) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no note")
		}
	}

	// Another process of this host drains the spool while the first runs: the claim is there.
	other := fence.New(s, fence.Config{LeaseTTL: time.Minute, Owner: "other", Liveness: live, SpoolDir: spool})
	if _, err := other.DrainSpool(ctx); err != nil {
		t.Fatalf("the other process's drain: %v", err)
	}
	adm, err = e.Prepare(ctx, req) // the retry
	if err != nil || !adm.Fresh() {
		t.Fatalf("the retry: %+v, %v; want it admitted", adm, err)
	}
	s.open()
	time.Sleep(500 * time.Millisecond)
	if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"charged"`)); err != nil {
		t.Fatalf("the retry's commit: %v", err)
	}
	var releases int
	if err := s.View(ctx, func(tx fence.Tx) error {
		return tx.Events(req.Intent, func(ev fence.Event) bool {
			t.Logf("event %s token %d: %s", ev.Kind, ev.Token, ev.Reason)
			if ev.Kind == fence.EventRelease {
				releases++
			}
			return true
		})
	}); err != nil {
		t.Fatal(err)
	}
	if releases != 1 {
		t.Errorf("%d releases; want 1", releases)
	}
	if n, _ := fence.SpoolFiles(spool); len(n) != 0 {
		t.Errorf("the spool: %v; want it empty", n)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := e.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ledger.Admitted != 2 {
		t.Errorf("the ledger's counters: %+v; want 2 admitted (warm and the retry)", st.Ledger)
	}
}
