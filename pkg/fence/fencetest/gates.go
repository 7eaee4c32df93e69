package fencetest

import (
	"errors"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// testGatesInOrder: the intent gate answers before the read-set check, and the read-set check
// before the domain reservation (SPEC §3). Every attempt below carries a stale read set: a
// done intent still replays (or is a conflict), a claimed one is in flight, a fenced one a
// prior failure; only a fresh intent is refused as stale, and it reserves no number. Each
// attempt is counted once, in the bucket of the gate that answered.
func testGatesInOrder(t *testing.T, newStore Factory) {
	t.Parallel()
	eng := fence.New(newStore(t), fence.Config{})
	done := mustCommit(t, eng, mustFresh(t, eng, fence.Request{Intent: "g:done", Tool: "t", Args: []byte(`{"n":1}`)}), `"r"`)
	mustFresh(t, eng, fence.Request{Intent: "g:held", Tool: "t", Args: []byte(`{"n":1}`)})
	if err := eng.Abort(ctx, mustFresh(t, eng, fence.Request{Intent: "g:failed", Tool: "t", Args: []byte(`{"n":1}`)}), "unknown"); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, eng, mustFresh(t, eng, fence.Request{Intent: "g:mover", Tool: "t", Domain: "g:read"}), `1`) // g:read is at 1
	before, err := eng.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stale := []fence.ReadSetEntry{{Domain: "g:read", Seq: 0}}
	attempt := func(intent, args string) (fence.Admission, error) {
		return eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "t", Args: []byte(args), Domain: "g:target", ReadSet: stale})
	}
	if adm, err := attempt("g:done", `{"n":1}`); err != nil || adm.Fresh() || adm.Cert.Hash != done.Hash {
		t.Errorf("done intent with a stale read set = %+v, %v; want its replay (the intent gate first)", adm, err)
	}
	if _, err := attempt("g:done", `{"n":2}`); !errors.Is(err, fence.ErrConflict) {
		t.Errorf("done intent, other call, stale read set: %v; want intent_conflict", err)
	}
	if _, err := attempt("g:held", `{"n":1}`); !errors.Is(err, fence.ErrInFlight) {
		t.Errorf("claimed intent with a stale read set: %v; want intent_in_flight", err)
	}
	if _, err := attempt("g:failed", `{"n":1}`); !errors.Is(err, fence.ErrPriorFailure) {
		t.Errorf("failed intent with a stale read set: %v; want prior_failure", err)
	}
	if _, err := attempt("g:new", `{"n":1}`); !errors.Is(err, fence.ErrStaleReadSet) {
		t.Errorf("new intent with a stale read set: %v; want stale_read_set", err)
	}
	if cur, err := eng.Current(ctx, "g:target"); err != nil || cur != 0 {
		t.Errorf("target domain at %d, %v after refusals; the reservation is the last gate", cur, err)
	}
	if s, err := eng.Status(ctx, "g:new"); err != nil || s.State != fence.StateNone {
		t.Errorf("refused new intent left %s, %v", s.State, err)
	}
	after, err := eng.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := before.SinceBoot.Add(fence.Counters{Replayed: 1, Conflict: 1, InFlight: 1, PriorFailure: 1, Stale: 1})
	if after.SinceBoot != want || after.Ledger != after.SinceBoot {
		t.Errorf("counters %+v (ledger %+v); want %+v", after.SinceBoot, after.Ledger, want)
	}
}
