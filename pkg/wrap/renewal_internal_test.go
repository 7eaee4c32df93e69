package wrap

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// outage is a store whose transactions fail while it is down, telling failed each time one
// did (a ledger away for a moment: a PostgreSQL restart or failover, a cut connection).
type outage struct {
	fence.Store
	mu     sync.Mutex
	down   bool
	failed chan struct{}
}

func (o *outage) Update(ctx context.Context, fn func(fence.Tx) error) error {
	o.mu.Lock()
	down := o.down
	o.mu.Unlock()
	if down {
		select {
		case o.failed <- struct{}{}:
		default:
		}
		return errors.New("the ledger does not answer")
	}
	return o.Store.Update(ctx, fn)
}

func (o *outage) set(down bool) {
	o.mu.Lock()
	o.down = down
	o.mu.Unlock()
}

// TestRenewalAfterAFailureComesBeforeTheLeaseLapses: a renewal of a call's lease that the
// ledger did not take is tried again soon, not a third of the lease later. Before, a wrap whose
// ledger was away for two renewals (a PostgreSQL failover of 20 to 40 s under the default
// 60 s lease) tried the third only once the lease had lapsed, though the ledger had been back
// for most of a third: a judge that cannot see the holder (another host on PostgreSQL, another
// PID namespace) took a re-run-safe call over while it ran (a second execution), and any other
// was fenced unknown under its running holder.
func TestRenewalAfterAFailureComesBeforeTheLeaseLapses(t *testing.T) {
	st := &outage{Store: fence.NewMemoryStore(), failed: make(chan struct{})}
	const lease = 6 * time.Second
	eng := fence.New(st, fence.Config{LeaseTTL: lease})
	p := &Proxy{opt: Options{Engine: eng, Log: io.Discard}}
	ctx := context.Background()
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "slow", Tool: "t", RerunSafe: true})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	claimed := adm.Ticket.LeaseUntil
	st.set(true)
	hb := p.heartbeat(*adm.Ticket)
	defer hb.stop()
	// Two renewals fail, then the ledger is back.
	for range 2 {
		<-st.failed
	}
	st.set(false)
	for {
		rec, err := eng.Status(ctx, "slow")
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != fence.StateInFlight {
			t.Fatalf("the claim is %s (%s), not in flight", rec.State, rec.Reason)
		}
		if rec.LeaseUntil.After(claimed) {
			renewed := rec.LeaseUntil.Add(-lease)
			if !renewed.Before(claimed) {
				t.Fatalf("the lease lapsed at %s and was renewed only at %s, though the ledger was back before: a judge that cannot see the holder takes a re-run-safe call over meanwhile",
					claimed.Format("15:04:05.000"), renewed.Format("15:04:05.000"))
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// silent is a store whose next transaction, once armed, waits until its context ends (a
// connection that no longer answers: no reset, the kernel retransmitting for minutes), and
// whose others are answered.
type silent struct {
	fence.Store
	armed atomic.Bool
	hung  chan struct{}
}

func (s *silent) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if s.armed.CompareAndSwap(true, false) {
		close(s.hung)
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Update(ctx, fn)
}

// TestRenewalOverAConnectionThatNoLongerAnswersIsTriedAgain: a renewal the ledger never answers
// is ended and tried again, not waited for while the lease lapses. Before, one renewal sent
// over a PostgreSQL connection that no longer answered (the server failed over, a NAT forgot
// it) held every later one for as long as the kernel retransmitted: a real wrap whose ledger's
// pooled connections were stopped (SIGSTOP of a TCP proxy's forwarder) let its lease lapse
// and stay lapsed for the 18 s it was watched, though a new connection reached the ledger.
func TestRenewalOverAConnectionThatNoLongerAnswersIsTriedAgain(t *testing.T) {
	st := &silent{Store: fence.NewMemoryStore(), hung: make(chan struct{})}
	const lease = 9 * time.Second
	eng := fence.New(st, fence.Config{LeaseTTL: lease})
	p := &Proxy{opt: Options{Engine: eng, Log: io.Discard}}
	ctx := context.Background()
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "slow", Tool: "t", RerunSafe: true})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	claimed := adm.Ticket.LeaseUntil
	st.armed.Store(true)
	hb := p.heartbeat(*adm.Ticket)
	defer hb.stop()
	<-st.hung
	for {
		rec, err := eng.Status(ctx, "slow")
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != fence.StateInFlight {
			t.Fatalf("the claim is %s (%s), not in flight", rec.State, rec.Reason)
		}
		if rec.LeaseUntil.After(claimed) {
			if renewed := rec.LeaseUntil.Add(-lease); !renewed.Before(claimed) {
				t.Fatalf("the lease lapsed at %s and was renewed only at %s", claimed.Format("15:04:05.000"), renewed.Format("15:04:05.000"))
			}
			return
		}
		if time.Now().After(claimed) {
			t.Fatalf("the lease lapsed at %s, not renewed: the renewal sent over a connection that no longer answers is still waited for", claimed.Format("15:04:05.000"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
