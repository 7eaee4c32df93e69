package fence_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// A PrepareWait whose ctx ends while it waits answers with the InFlightError it waited on
// (its doc says so since 2026-12-06; it said only maxWait's end gave one), and promptly.
func TestPrepareWaitCutByItsContextAnswersInFlight(t *testing.T) {
	ctx := context.Background()
	e := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer e.Close()
	req := fence.Request{Intent: "x", Tool: "t"}
	if adm, err := e.Prepare(ctx, req); err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.PrepareWait(wctx, req, time.Minute)
	if !errors.Is(err, fence.ErrInFlight) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait cut by its context: %v; want the InFlightError it waited on", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the wait ended %v after its context was given 50 ms", d)
	}
}

// cutStore runs cut, once set, with the context of each reading or writing of the ledger
// before the store sees it: the wait's context ending as the ledger is asked again.
type cutStore struct {
	askedStore
	cut atomic.Pointer[func(context.Context)]
}

func (s *cutStore) View(ctx context.Context, fn func(fence.Tx) error) error {
	s.cutNow(ctx)
	return s.askedStore.View(ctx, fn)
}

func (s *cutStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	s.cutNow(ctx)
	return s.askedStore.Update(ctx, fn)
}

func (s *cutStore) cutNow(ctx context.Context) {
	if c := s.cut.Load(); c != nil {
		(*c)(ctx)
	}
}

// The same on a real SQLite ledger (which refuses a read whose context has ended), with ctx
// ended at the very ask rather than by timing: cancelled as the wait asks the ledger again
// (wrap's duplicates wait so, their ctx cancelled when the attempt they wait on fails
// definitely or the front stops), or its deadline passing while the ask waits (a ledger that
// does not answer, as serve's bound ends a fence_prepare's). The wait answers the
// InFlightError it waited on and is counted refused in flight once, as docs/gateway.md says
// of a duplicate given the failure it waited for: a store error there was counted nowhere.
func TestWaitCutShortAsItAsksAgainEndsInFlight(t *testing.T) {
	for _, how := range []string{"cancelled", "deadline"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			led, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			st := &cutStore{askedStore: askedStore{Store: led, asked: make(chan struct{}, 1)}}
			eng := fence.New(st, fence.Config{})
			t.Cleanup(func() { eng.Close() })
			req := fence.Request{Intent: "cut-short", Tool: "charge"}
			if holder, err := eng.Prepare(ctx, req); err != nil || !holder.Fresh() {
				t.Fatalf("a free intent: %+v, %v; want it admitted", holder, err)
			}
			wctx, cancel := context.WithCancel(ctx)
			cut := func(context.Context) { cancel() }
			if how == "deadline" {
				// Long enough for the first ask; the next waits for it to pass.
				wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
				cut = func(c context.Context) { <-c.Done() }
			}
			defer cancel()
			ended := make(chan error, 1)
			st.armed.Store(true)
			go func() {
				_, err := eng.PrepareWait(wctx, req, time.Minute)
				ended <- err
			}()
			select {
			case <-st.asked: // it asked once and waits
			case <-time.After(30 * time.Second):
				t.Fatal("the waiter never asked the ledger")
			}
			st.cut.Store(&cut)
			select {
			case err := <-ended:
				if !errors.Is(err, fence.ErrInFlight) {
					t.Fatalf("the wait cut short as it asked again ended with %v, want intent_in_flight", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the wait went on after its context ended")
			}
			st.cut.Store(nil)
			stats, err := eng.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := (fence.Counters{Admitted: 1, InFlight: 1}); stats.SinceBoot != want {
				t.Fatalf("counters %s, want %s", stats.SinceBoot.Line(), want.Line())
			}
		})
	}
}
