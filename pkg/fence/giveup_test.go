package fence_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// askedStore tells asked each time a reading or writing of the ledger has ended, once armed.
type askedStore struct {
	fence.Store
	armed atomic.Bool
	asked chan struct{}
}

func (s *askedStore) View(ctx context.Context, fn func(fence.Tx) error) error {
	defer s.tell()
	return s.Store.View(ctx, fn)
}

func (s *askedStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	defer s.tell()
	return s.Store.Update(ctx, fn)
}

func (s *askedStore) tell() {
	if s.armed.Load() {
		select {
		case s.asked <- struct{}{}:
		default:
		}
	}
}

// PrepareWaitUntil: a wait given up (giveUp closed) ends with the InFlightError it waited on,
// counted as refused in flight, never as coalesced, and the holder's cert goes to later
// attempts only. Giving up never touches an admission: an intent nobody holds is claimed
// even with giveUp closed already, and the holder's run and commit go on as if nobody waited.
func TestPrepareWaitGivenUp(t *testing.T) {
	ctx := context.Background()
	st := &askedStore{Store: fence.NewMemoryStore(), asked: make(chan struct{}, 1)}
	eng := fence.New(st, fence.Config{})
	req := fence.Request{Intent: "give-up", Tool: "charge"}
	closedAlready := make(chan struct{})
	close(closedAlready)

	holder, err := eng.PrepareWaitUntil(ctx, req, time.Minute, closedAlready)
	if err != nil || !holder.Fresh() {
		t.Fatalf("a free intent with giveUp closed: %+v, %v; want it admitted", holder, err)
	}

	// A waiter on the held intent, given up once it has asked the ledger (it waits then).
	giveUp := make(chan struct{})
	ended := make(chan error, 1)
	st.armed.Store(true)
	go func() {
		_, err := eng.PrepareWaitUntil(ctx, req, time.Minute, giveUp)
		ended <- err
	}()
	select {
	case <-st.asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter never asked the ledger")
	}
	st.armed.Store(false)
	close(giveUp)
	select {
	case err := <-ended:
		if !errors.Is(err, fence.ErrInFlight) {
			t.Fatalf("the given-up wait ended with %v, want intent_in_flight", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait went on after it was given up (maxWait is a minute)")
	}
	// One given up before it asked: it asks once, finds the intent in flight and ends there.
	if _, err := eng.PrepareWaitUntil(ctx, req, time.Minute, closedAlready); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("a wait given up before it began ended with %v, want intent_in_flight", err)
	}

	if _, err := eng.Commit(ctx, *holder.Ticket, []byte(`"charged"`)); err != nil {
		t.Fatal(err)
	}
	if adm, err := eng.PrepareWait(ctx, req, time.Minute); err != nil || adm.Fresh() || string(adm.Cert.Result) != `"charged"` {
		t.Fatalf("the attempt after the commit: %+v, %v; want the replay", adm, err)
	}
	stats, err := eng.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fence.Counters{Admitted: 1, InFlight: 2, Replayed: 1}
	if stats.SinceBoot != want {
		t.Fatalf("counters %s, want %s", stats.SinceBoot.Line(), want.Line())
	}
}

// PrepareWaitUncounted leaves its answer out of the counters: only Count puts it in its
// bucket, so a caller that asks again for one call (wrap's continuation, a refusal DrainedFor
// says to ask again about) counts that call once.
func TestPrepareWaitUncountedIsCountedByCountAlone(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	req := fence.Request{Intent: "uncounted", Tool: "charge"}
	sinceBoot := func() fence.Counters {
		t.Helper()
		st, err := eng.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.SinceBoot
	}
	holder, admitted, err := eng.PrepareWaitUncounted(ctx, req, 0, nil)
	if err != nil || !holder.Fresh() {
		t.Fatalf("a free intent: %+v, %v; want it admitted", holder, err)
	}
	_, refused, err := eng.PrepareWaitUncounted(ctx, req, 0, nil)
	if !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("a duplicate: %v; want intent_in_flight", err)
	}
	if got := sinceBoot(); !got.IsZero() {
		t.Fatalf("counted %s before Count", got.Line())
	}
	eng.Count(admitted)
	eng.Count(fence.Decision{}) // counts nothing
	if got, want := sinceBoot(), (fence.Counters{Admitted: 1}); got != want {
		t.Fatalf("counted %s, want %s", got.Line(), want.Line())
	}
	eng.Count(refused)
	if got, want := sinceBoot(), (fence.Counters{Admitted: 1, InFlight: 1}); got != want {
		t.Fatalf("counted %s, want %s", got.Line(), want.Line())
	}
}
