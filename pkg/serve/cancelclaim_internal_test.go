package serve

import (
	"context"
	"errors"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A fence_prepare whose agent cancelled the request while the ledger admitted it: the client
// drops the answer to a request it cancelled, so the ticket would reach nobody and the claim
// stay in flight (then unknown, every retry refused). The claim is released and the answer
// is a cancellation without the ticket; a retry is admitted. Before, the ticket was answered
// to nobody and the intent held.
func TestPrepareCancelledWhileAdmittedReleasesTheClaim(t *testing.T) {
	for _, wait := range []float64{0, 5} {
		st := fence.NewMemoryStore()
		eng := fence.New(st, fence.Config{})
		s, err := New(eng, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the cancellation arrives while the ledger admits the claim
		in := PrepareInput{Intent: "charge:order-1", Tool: "charge_card", Args: []byte(`{"amount":5}`), WaitSecs: wait}
		out, err := s.prepare(ctx, in)
		if err == nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("wait %v: answered %+v %v; want a cancellation, no ticket", wait, out, err)
		}
		if r := RefusalOf(in.Intent, err); r.Next == "" || errors.Is(err, fence.ErrInFlight) {
			t.Fatalf("wait %v: refusal %+v", wait, r)
		}
		rec, err := eng.Status(context.Background(), in.Intent)
		if err != nil || rec.State != fence.StateNone {
			t.Fatalf("wait %v: the intent is %s (%v); want it released", wait, rec.State, err)
		}
		var released int
		if err := st.View(context.Background(), func(tx fence.Tx) error {
			return tx.Events(in.Intent, func(ev fence.Event) bool {
				if ev.Kind == fence.EventRelease && ev.Reason == cancelledBeforeTicket {
					released++
				}
				return true
			})
		}); err != nil {
			t.Fatal(err)
		}
		if released != 1 {
			t.Fatalf("wait %v: %d release events saying why", wait, released)
		}
		again, err := s.prepare(context.Background(), in)
		if p, ok := again.(PrepareResult); err != nil || !ok || p.Status != StatusFresh {
			t.Fatalf("wait %v: the retry: %+v %v; want admitted", wait, again, err)
		}
		eng.Close()
	}
}
