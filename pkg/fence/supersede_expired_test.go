package fence_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A call repeated identically after its replay window, with the same result each time, has
// the same cert each time, so each superseded record takes the next of the sixteen names
// (SupersededIntent, then ~2 … ~16). Once those records' result TTL has passed they are
// forgotten, as every expired outcome is: the gates ignore them and Status shows none, so a
// later repeat moves its record over one of them. Before, they held their names until a sweep
// dropped them (never, on a memory store no one sweeps), and every later repeat was refused:
// "cannot be moved aside".
func TestSupersedeTakesTheNameOfAnExpiredRecord(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	e := fence.New(fence.NewMemoryStoreClock(clock), fence.Config{ResultTTL: time.Hour})
	defer e.Close()
	req := fence.Request{Intent: "wrap:restart", Tool: "restart", Args: []byte(`{"service":"web"}`), ReplayWindow: time.Second}
	run := func(round int) {
		t.Helper()
		adm, err := e.Prepare(ctx, req)
		if err != nil || !adm.Fresh() {
			t.Fatalf("repeat %d after the window: %+v %v; want it admitted", round, adm, err)
		}
		if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"restarted"`)); err != nil {
			t.Fatalf("repeat %d: commit: %v", round, err)
		}
	}
	round := 0
	for ; round <= 16; round++ { // the first call and sixteen repeats fill every name
		run(round)
		advance(2 * time.Second)
	}
	advance(2 * time.Hour) // every superseded record's result TTL has passed
	for i := 0; i < 3; i++ {
		run(round)
		round++
		advance(2 * time.Second)
	}
}
