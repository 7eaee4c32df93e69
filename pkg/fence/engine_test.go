package fence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// gatedStore holds every Update at a barrier until n of them arrived, forcing the read-only
// passes of n attempts to finish before any write pass starts: the same instant, made certain.
type gatedStore struct {
	fence.Store
	mu      sync.Mutex
	n       int
	arrived int
	open    chan struct{}
}

func (g *gatedStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	g.mu.Lock()
	g.arrived++
	if g.arrived == g.n {
		close(g.open)
	}
	g.mu.Unlock()
	<-g.open
	return g.Store.Update(ctx, fn)
}

func TestDomainRaceToldApartFromStale(t *testing.T) {
	const racers = 3
	g := &gatedStore{Store: fence.NewMemoryStore(), n: racers, open: make(chan struct{})}
	eng := fence.New(g, fence.Config{})
	var wg sync.WaitGroup
	errs := make([]error, racers)
	fresh := make([]bool, racers)
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			adm, err := eng.Prepare(context.Background(), fence.Request{
				Intent: string(rune('a' + i)), Tool: "scale", Domain: "deploy",
				ReadSet: []fence.ReadSetEntry{{Domain: "deploy", Seq: 0}},
			})
			errs[i], fresh[i] = err, err == nil && adm.Fresh()
		}(i)
	}
	wg.Wait()
	winners, races := 0, 0
	for i := range errs {
		if fresh[i] {
			winners++
			continue
		}
		var race fence.DomainRaceError
		if !errors.As(errs[i], &race) || race.Domain != "deploy" || race.Expected != 0 || race.Actual != 1 {
			t.Fatalf("loser %d: %v, want domain_race with facts", i, errs[i])
		}
		races++
	}
	if winners != 1 || races != racers-1 {
		t.Fatalf("winners %d races %d", winners, races)
	}
	// An attempt that arrives after the move is stale, not a race.
	_, err := fence.New(fence.NewMemoryStore(), fence.Config{}).Prepare(context.Background(), fence.Request{
		Intent: "late", Tool: "scale", Domain: "deploy", ReadSet: []fence.ReadSetEntry{{Domain: "deploy", Seq: 3}},
	})
	if !errors.Is(err, fence.ErrStaleReadSet) {
		t.Fatalf("late attempt: %v", err)
	}
}

func TestErrorsCarryCodesAndAdvice(t *testing.T) {
	cases := []struct {
		err      error
		sentinel error
		code     string
	}{
		{fence.InFlightError{Intent: "i"}, fence.ErrInFlight, "intent_in_flight"},
		{fence.PriorFailureError{Intent: "i", State: fence.StateUnknown}, fence.ErrPriorFailure, "prior_failure"},
		{fence.IntentConflictError{Intent: "i"}, fence.ErrConflict, "intent_conflict"},
		{fence.StaleReadSetError{Intent: "i"}, fence.ErrStaleReadSet, "stale_read_set"},
		{fence.DomainRaceError{Intent: "i"}, fence.ErrDomainRace, "domain_race"},
		{fence.LeaseLostError{Intent: "i"}, fence.ErrLeaseLost, "lease_lost"},
		{fence.InvalidError{Field: "intent"}, fence.ErrInvalid, "invalid_request"},
	}
	for _, c := range cases {
		wrapped := errors.Join(errors.New("context"), c.err)
		if !errors.Is(wrapped, c.sentinel) || fence.CodeOf(wrapped) != c.code {
			t.Errorf("%T: Is=%v code=%q", c.err, errors.Is(wrapped, c.sentinel), fence.CodeOf(wrapped))
		}
		for _, other := range cases {
			if other.sentinel != c.sentinel && errors.Is(c.err, other.sentinel) {
				t.Errorf("%T matches %v", c.err, other.sentinel)
			}
		}
	}
	if fence.CodeOf(errors.New("disk full")) != fence.CodeStore || fence.CodeOf(nil) != "" {
		t.Error("CodeOf of plain errors")
	}
	msg := fence.PriorFailureError{Intent: "charge:o'1", State: fence.StateUnknown, Reason: "crash"}.Error()
	if want := `effectfence ledger clear 'charge:o'\''1' --reason`; !strings.Contains(msg, want) {
		t.Errorf("advice %q lacks %q", msg, want)
	}
}
