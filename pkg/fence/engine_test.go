package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// A replay window makes a late identical attempt a new action; the superseded done record
// stays in the ledger, audited, and earlier attempts within the window replay.
func TestReplayWindowSupersedes(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := fence.NewMemoryStoreClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return clock })
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	eng := fence.New(st, fence.Config{})
	req := fence.Request{Intent: "wrap:toggle:x", Tool: "toggle", Args: json.RawMessage(`{}`), ReplayWindow: 10 * time.Minute}
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	first, err := eng.Commit(ctx, *adm.Ticket, []byte(`"on"`))
	if err != nil {
		t.Fatal(err)
	}
	advance(9 * time.Minute)
	if adm, err = eng.Prepare(ctx, req); err != nil || adm.Fresh() || adm.Cert.Hash != first.Hash || adm.RecordedAt.IsZero() {
		t.Fatalf("within the window: %+v %v", adm, err)
	}
	advance(2 * time.Minute)
	if adm, err = eng.Prepare(ctx, req); err != nil || !adm.Fresh() {
		t.Fatalf("after the window the attempt must be a new action: %+v %v", adm, err)
	}
	second, err := eng.Commit(ctx, *adm.Ticket, []byte(`"off"`))
	if err != nil || second.Hash == first.Hash {
		t.Fatal(err)
	}
	old, err := eng.Status(ctx, fence.SupersededIntent(req.Intent, first.Hash))
	if err != nil || old.State != fence.StateDone || old.Cert.Hash != first.Hash {
		t.Fatalf("superseded record: %+v %v", old, err)
	}
	var kinds []string
	err = st.View(ctx, func(tx fence.Tx) error {
		return tx.Events(req.Intent, func(ev fence.Event) bool { kinds = append(kinds, ev.Kind); return true })
	})
	if err != nil || !slices.Contains(kinds, fence.EventSuperseded) {
		t.Fatalf("no audit of the supersession: %v %v", kinds, err)
	}
	// Without a window the same late attempt replays (serve's and the library's explicit intents).
	advance(time.Hour)
	plain := req
	plain.ReplayWindow = 0
	if adm, err = eng.Prepare(ctx, plain); err != nil || adm.Fresh() || adm.Cert.Hash != second.Hash {
		t.Fatalf("no window: %+v %v", adm, err)
	}
}

// On a memory store with the wall clock the read-only pass tells expiry by time.Until: a
// recorded instant with a monotonic reading (the engine's own) and one without (decoded from
// JSON, say) are both judged as time.Now would judge them, for the result TTL and for the
// replay window alike.
func TestWallClockExpiryAndReplayWindow(t *testing.T) {
	ctx := context.Background()
	st := fence.NewMemoryStore()
	eng := fence.New(st, fence.Config{})
	req := fence.Request{Intent: "i", Tool: "t", Args: json.RawMessage(`{}`)}
	adm, err := eng.Prepare(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	var done fence.Record
	if err := st.View(ctx, func(tx fence.Tx) error {
		rec, err := tx.Get("i")
		if rec != nil {
			done = *rec
		}
		return err
	}); err != nil || done.State != fence.StateDone {
		t.Fatal(done.State, err)
	}
	hour := time.Hour
	cases := []struct {
		name      string
		expiresAt time.Time
		updatedAt time.Time
		window    time.Duration
		fresh     bool
	}{
		{"recorded, unexpired", time.Now().Add(hour), time.Now(), 0, false},
		{"recorded, expired", time.Now().Add(-hour), time.Now().Add(-2 * hour), 0, true},
		{"decoded, unexpired", time.Now().Add(hour).Round(0), time.Now().Round(0), 0, false},
		{"decoded, expired", time.Now().Add(-hour).Round(0), time.Now().Add(-2 * hour).Round(0), 0, true},
		{"recorded, within the window", time.Now().Add(hour), time.Now().Add(-time.Minute), hour, false},
		{"recorded, beyond the window", time.Now().Add(hour), time.Now().Add(-2 * hour), hour, true},
		{"decoded, within the window", time.Now().Add(hour).Round(0), time.Now().Add(-time.Minute).Round(0), hour, false},
		{"decoded, beyond the window", time.Now().Add(hour).Round(0), time.Now().Add(-2 * hour).Round(0), hour, true},
	}
	for i, c := range cases {
		rec := done
		rec.Intent = "i" + strconv.Itoa(i)
		rec.ExpiresAt, rec.UpdatedAt = c.expiresAt, c.updatedAt
		if err := st.Update(ctx, func(tx fence.Tx) error { return tx.Put(&rec) }); err != nil {
			t.Fatal(err)
		}
		r := req
		r.Intent, r.ReplayWindow = rec.Intent, c.window
		adm, err := eng.Prepare(ctx, r)
		if err != nil || adm.Fresh() != c.fresh {
			t.Errorf("%s: fresh %v, want %v (%v)", c.name, adm.Fresh(), c.fresh, err)
		}
	}
}

// ClearUnlessHeld refuses a claim its holder holds (lease running, holder alive), changing
// nothing, and clears it once the lease lapsed, as it clears every other state; Clear clears
// a held claim too.
func TestClearUnlessHeld(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	clock := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	st := fence.NewMemoryStoreClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return clock })
	eng := fence.New(st, fence.Config{LeaseTTL: time.Minute})
	claim := func(intent string) {
		t.Helper()
		if adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: json.RawMessage(`{}`)}); err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
	}
	claim("held")
	if _, err := eng.ClearUnlessHeld(ctx, "held", "op", "checked"); !errors.Is(err, fence.ErrNotFenced) || fence.CodeOf(err) != fence.CodeNotFenced {
		t.Fatalf("clear of a held claim: %v; want not_fenced", err)
	}
	if rec, err := eng.Status(ctx, "held"); err != nil || rec.State != fence.StateInFlight {
		t.Fatalf("after the refusal: %v, %v", rec.State, err)
	}
	if prev, err := eng.Clear(ctx, "held", "op", "forced"); err != nil || prev.State != fence.StateInFlight {
		t.Fatalf("Clear of a held claim: %v, %v", prev.State, err)
	}
	// A lapsed claim: an operator's process (another owner) judges its holder. Alive (stopped
	// or stalled on this host, or this very process): refused, in flight or once a duplicate
	// made it unknown; out of sight or gone: cleared.
	seen := fence.Alive
	op := fence.New(st, fence.Config{LeaseTTL: time.Minute, Owner: "operator", Liveness: func(string) fence.Liveness { return seen }})
	for _, intent := range []string{"lapsed", "lapsed-unknown", "lapsed-out-of-sight", "lapsed-gone"} {
		claim(intent)
	}
	mu.Lock()
	clock = clock.Add(2 * time.Minute)
	mu.Unlock()
	if _, err := eng.Prepare(ctx, fence.Request{Intent: "lapsed-unknown", Tool: "charge", Args: json.RawMessage(`{}`)}); fence.CodeOf(err) != fence.CodePriorFailure {
		t.Fatalf("a duplicate of a lapsed claim of a live holder: %v; want prior_failure", err)
	}
	for _, c := range []struct {
		e      *fence.Engine
		intent string
		state  fence.State
	}{{eng, "lapsed", fence.StateInFlight}, {op, "lapsed", fence.StateInFlight}, {op, "lapsed-unknown", fence.StateUnknown}} {
		_, err := c.e.ClearUnlessHeld(ctx, c.intent, "op", "checked")
		if !errors.Is(err, fence.ErrNotFenced) || !strings.Contains(err.Error(), "still runs on this host") {
			t.Fatalf("clear of %s, whose holder is alive past its lease: %v; want not_fenced naming the live holder", c.intent, err)
		}
		if rec, err := eng.Status(ctx, c.intent); err != nil || rec.State != c.state {
			t.Fatalf("after the refusal: %v, %v; want %s", rec.State, err, c.state)
		}
		if _, err := c.e.Resolve(ctx, fence.ResolveRequest{Intent: c.intent, How: fence.DidNotHappen, Reason: "checked"}); !errors.Is(err, fence.ErrNotFenced) || !strings.Contains(err.Error(), "still runs on this host") {
			t.Fatalf("resolve did-not-happen of %s, whose holder is alive past its lease: %v; want not_fenced", c.intent, err)
		}
	}
	for _, c := range []struct {
		intent string
		seen   fence.Liveness
	}{{"lapsed-unknown", fence.Dead}, {"lapsed-out-of-sight", fence.CannotTell}, {"lapsed-gone", fence.Dead}} {
		seen = c.seen
		if prev, err := op.ClearUnlessHeld(ctx, c.intent, "op", "checked"); err != nil || prev.Intent != c.intent {
			t.Fatalf("clear of %s, whose holder is %v: %v, %v", c.intent, c.seen, prev.State, err)
		}
	}
	// A holder that reported the outcome unknown itself (Lost: its child died mid-call) is done
	// with the call: alive, it is no reason to refuse.
	seen = fence.Alive
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "lost", Tool: "charge", Args: json.RawMessage(`{}`)})
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if err := eng.Lost(ctx, *adm.Ticket, "the child died mid-call"); err != nil {
		t.Fatal(err)
	}
	if prev, err := op.ClearUnlessHeld(ctx, "lost", "op", "checked"); err != nil || prev.State != fence.StateUnknown {
		t.Fatalf("clear of an intent its live holder reported unknown: %v, %v", prev.State, err)
	}
	if prev, err := op.Clear(ctx, "lapsed", "op", "forced"); err != nil || prev.State != fence.StateInFlight {
		t.Fatalf("Clear (forced) of a lapsed claim of a live holder: %v, %v", prev.State, err)
	}

	// A claim whose holder process is gone while its lease runs: whoever holds its ticket (a
	// serve claim's agent, a process its holder started) may still run the effect. Refused
	// until the lease lapses, in flight and once a duplicate made it unknown (found in review,
	// 2026-12-05: cleared at once, the agent's effect then ran twice).
	seen = fence.Dead
	claim("gone-leased")
	claim("gone-leased-unknown")
	if _, err := op.Prepare(ctx, fence.Request{Intent: "gone-leased-unknown", Tool: "charge", Args: json.RawMessage(`{}`)}); fence.CodeOf(err) != fence.CodePriorFailure {
		t.Fatalf("a duplicate of a claim of a gone holder: %v; want prior_failure", err)
	}
	for _, intent := range []string{"gone-leased", "gone-leased-unknown"} {
		if _, err := op.ClearUnlessHeld(ctx, intent, "op", "checked"); !errors.Is(err, fence.ErrNotFenced) || !strings.Contains(err.Error(), "lease of claim") {
			t.Fatalf("clear of %s, its holder gone and its lease running: %v; want not_fenced naming the lease", intent, err)
		}
		if _, err := op.Resolve(ctx, fence.ResolveRequest{Intent: intent, How: fence.DidNotHappen, Reason: "checked"}); !errors.Is(err, fence.ErrNotFenced) {
			t.Fatalf("resolve did-not-happen of %s, its holder gone and its lease running: %v; want not_fenced", intent, err)
		}
	}
	mu.Lock()
	clock = clock.Add(2 * time.Minute)
	mu.Unlock()
	for _, intent := range []string{"gone-leased", "gone-leased-unknown"} {
		if _, err := op.ClearUnlessHeld(ctx, intent, "op", "checked"); err != nil {
			t.Fatalf("clear of %s once its lease lapsed, its holder gone: %v", intent, err)
		}
	}

	// A done intent: its effect ran. An operator who looked at it unknown (and cleared what
	// they checked) must not free it after it healed or was resolved meanwhile: refused
	// without force, cleared with it.
	adm, err = eng.Prepare(ctx, fence.Request{Intent: "done", Tool: "charge", Args: json.RawMessage(`{}`)})
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := op.ClearUnlessHeld(ctx, "done", "op", "checked"); !errors.Is(err, fence.ErrNotFenced) || fence.CodeOf(err) != fence.CodeNotFenced {
		t.Fatalf("clear of a done intent: %v; want not_fenced", err)
	}
	if prev, err := op.Clear(ctx, "done", "op", "forced"); err != nil || prev.State != fence.StateDone {
		t.Fatalf("Clear (forced) of a done intent: %v, %v", prev.State, err)
	}
}
