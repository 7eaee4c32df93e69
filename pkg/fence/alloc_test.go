package fence_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// The engine's allocations on its two hot paths, counted exactly (issue 16: a replay allocates
// nothing beyond its answer; a fresh admission and commit at most a handful of objects).
// Counts, not timings: they are the same on a loaded machine.

func TestReplayAllocatesOnlyItsAnswer(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	r := fence.Request{Intent: "charge:order-123", Tool: "charge_card", Args: []byte(`{"amount":4900,"currency":"usd"}`), Agent: "billing"}
	adm, err := eng.Prepare(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`)); err != nil {
		t.Fatal(err)
	}
	// A request with a read set takes the pooled pass (Prepare on any store), which must not
	// move the caller's request to the heap either.
	withReadSet := r
	withReadSet.ReadSet = []fence.ReadSetEntry{{Domain: "acct:1", Seq: 0}}
	for _, c := range []struct {
		name    string
		prepare func() (fence.Admission, error)
	}{
		{"Prepare", func() (fence.Admission, error) { return eng.Prepare(ctx, r) }},
		{"Prepare with a read set", func() (fence.Admission, error) { return eng.Prepare(ctx, withReadSet) }},
	} {
		n := testing.AllocsPerRun(1000, func() {
			adm, err := c.prepare()
			if err != nil || adm.Cert == nil {
				t.Fatal(c.name, ": not a replay", err)
			}
		})
		if n != 1 { // the cert the caller owns
			t.Errorf("%s: a replay allocates %v objects; want 1, its answer", c.name, n)
		}
	}
}

func TestFreshAdmissionAndCommitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	const runs = 1000
	intents := make([]string, runs+1) // AllocsPerRun runs the function once more to warm up
	for i := range intents {
		intents[i] = "charge:" + strconv.Itoa(i)
	}
	args, result := []byte(`{"amount":4900,"currency":"usd"}`), []byte(`{"charge":"ch"}`)
	i := 0
	n := testing.AllocsPerRun(runs, func() {
		adm, err := eng.Prepare(ctx, fence.Request{Intent: intents[i], Tool: "charge_card", Args: args, Domain: "acct:1", Agent: "billing"})
		i++
		if err != nil || !adm.Fresh() {
			t.Fatal("not fresh", err)
		}
		if _, err := eng.Commit(ctx, *adm.Ticket, result); err != nil {
			t.Fatal(err)
		}
	})
	// The claim with its ticket, its nonce, the copy of the result, the done record, its cert
	// with the bytes of its two digests, and the caller's copy of the cert; the records table's
	// growth adds a fraction.
	if n > 6 {
		t.Errorf("a fresh admission and commit allocate %v objects; want at most 6", n)
	}
}
