package fence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// slowStore applies each Update whatever its context, then returns after a random delay of up
// to 3 ms: a claim's answer that comes about when PrepareWaitBeside gives it up.
type slowStore struct{ *fence.MemoryStore }

func (s slowStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	err := s.MemoryStore.Update(context.Background(), fn)
	time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	return err
}

// TestClaimAnsweredAsItIsGivenUpIsNeverBoth: a claim whose write returns at about the moment
// PrepareWaitBeside gives it up (select picks among ready cases at random) is either handed
// to the caller, and then never released by the engine, or given up (ErrClaimStuck, no
// ticket), and then released: never handed out and released, which would let a retry run
// the call a second time while the first runs.
func TestClaimAnsweredAsItIsGivenUpIsNeverBoth(t *testing.T) {
	s := slowStore{fence.NewMemoryStore()}
	e := fence.New(s, fence.Config{LeaseTTL: time.Minute})
	defer e.Close()
	var fresh, stuck []fence.Request
	nonces := map[string]string{}
	for i := range 200 {
		req := fence.Request{Intent: fmt.Sprintf("charge-%d", i), Tool: "charge", Args: []byte(`{"n":1}`)}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(2000))*time.Microsecond)
		adm, _, err := e.PrepareWaitBeside(ctx, req, 0, nil, time.Duration(rand.IntN(2000))*time.Microsecond, "given up: never sent")
		cancel()
		switch {
		case errors.Is(err, fence.ErrClaimStuck):
			if adm.Ticket != nil {
				t.Fatalf("given up with a ticket: %+v", adm)
			}
			stuck = append(stuck, req)
		case err == nil && adm.Fresh():
			fresh = append(fresh, req)
			nonces[req.Intent] = adm.Ticket.Nonce
		default:
			// The store's error as ctx ended: not admitted, nothing to check but no ticket.
			if adm.Ticket != nil {
				t.Fatalf("an error with a ticket: %+v, %v", adm, err)
			}
		}
	}
	t.Logf("%d admitted, %d given up", len(fresh), len(stuck))
	// The claims given up are released in the background (orphan.go): waited for, up to 10 s.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		left := 0
		for _, req := range stuck {
			if rec, _ := recordOf(t, s.MemoryStore, req.Intent); rec != nil {
				left++
			}
		}
		if left == 0 {
			break
		}
	}
	time.Sleep(300 * time.Millisecond) // and a release of an admitted claim would come by now
	for _, req := range fresh {
		rec, rel := recordOf(t, s.MemoryStore, req.Intent)
		if rec == nil || rec.Nonce != nonces[req.Intent] || rec.State != fence.StateInFlight || len(rel) != 0 {
			t.Errorf("intent %s admitted to its caller: record %+v, releases %+v; want its claim in flight, untouched", req.Intent, rec, rel)
		}
	}
	for _, req := range stuck {
		if rec, _ := recordOf(t, s.MemoryStore, req.Intent); rec != nil {
			t.Errorf("intent %s given up: record %+v; want it released", req.Intent, rec)
		}
	}
}
