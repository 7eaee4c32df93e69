package fence_test

import (
	"context"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A holder whose process died goes on through another process over the same ledger (a new
// serve process, say) and renews its lease there: Heartbeat answers a fresh lease, "keep
// running". The claim is then held through the live process: a third process's attempt is
// refused in flight. Before, the record kept the dead process as its owner, so the attempt
// judged the holder gone while it ran: a re-run-safe claim was taken over (a second execution
// beside the first), any other fenced as unknown, for an operator to clear under the holder.
// The holder's commit lands either way.
func TestHeartbeatThroughAnotherProcessHoldsTheClaim(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []fence.ExpiryPolicy{fence.Fence, fence.Reclaim} {
		t.Run(string(policy), func(t *testing.T) {
			mem := fence.NewMemoryStore()
			dead := func(owner string) fence.Liveness {
				if owner == "host/dead" {
					return fence.Dead
				}
				return fence.Alive
			}
			eng := func(owner string) *fence.Engine {
				e := fence.New(mem, fence.Config{Owner: owner, Liveness: dead, OnLeaseExpiry: policy})
				t.Cleanup(func() { e.Close() })
				return e
			}
			first, second, third := eng("host/dead"), eng("host/second"), eng("host/third")
			req := fence.Request{Intent: "deploy:web", Tool: "kubectl_apply", Args: []byte(`{"rev":42}`)}
			adm, err := first.Prepare(ctx, req)
			if err != nil || !adm.Fresh() {
				t.Fatalf("the first prepare: %+v %v", adm, err)
			}
			renewed, err := second.Heartbeat(ctx, *adm.Ticket)
			if err != nil {
				t.Fatalf("the holder's heartbeat through a second process: %v", err)
			}
			for i := range 2 {
				got, err := third.Prepare(ctx, req)
				if fence.CodeOf(err) != fence.CodeInFlight {
					t.Fatalf("attempt %d while the holder heartbeats through a live process: %+v %v; want intent_in_flight", i, got, err)
				}
			}
			if _, err := second.Commit(ctx, renewed, []byte(`{"applied":42}`)); err != nil {
				t.Fatalf("the holder's commit: %v", err)
			}
			if got, err := third.Prepare(ctx, req); err != nil || got.Cert == nil {
				t.Fatalf("a duplicate after the commit: %+v %v", got, err)
			}
		})
	}
}
