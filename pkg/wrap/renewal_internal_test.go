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
	eng, p, ticket := heldClaim(t, st, lease)
	st.set(true)
	hb := p.heartbeat(ticket)
	defer hb.stop()
	// Two renewals fail, then the ledger is back.
	for range 2 {
		<-st.failed
	}
	st.set(false)
	renewedInTime(t, eng, ticket.LeaseUntil, lease, "though the ledger was back before: a judge that cannot see the holder takes a re-run-safe call over meanwhile")
}

// heldClaim is a re-run-safe claim of intent "slow" in a fence over st, and a proxy whose
// heartbeat can renew it.
func heldClaim(t *testing.T, st fence.Store, lease time.Duration) (*fence.Engine, *Proxy, fence.Ticket) {
	t.Helper()
	eng := fence.New(st, fence.Config{LeaseTTL: lease})
	adm, err := eng.Prepare(context.Background(), fence.Request{Intent: "slow", Tool: "t", RerunSafe: true})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	return eng, &Proxy{opt: Options{Engine: eng, Log: io.Discard}}, *adm.Ticket
}

// renewedInTime waits for the claim of "slow", whose lease ran to claimed, to be renewed, and
// fails the test if it is no longer in flight, if the renewal came only after the lease had
// lapsed, or if the lease lapses without one (why says what that means).
func renewedInTime(t *testing.T, eng *fence.Engine, claimed time.Time, lease time.Duration, why string) {
	t.Helper()
	for {
		rec, err := eng.Status(context.Background(), "slow")
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != fence.StateInFlight {
			t.Fatalf("the claim is %s (%s), not in flight", rec.State, rec.Reason)
		}
		if rec.LeaseUntil.After(claimed) {
			if renewed := rec.LeaseUntil.Add(-lease); !renewed.Before(claimed) {
				t.Fatalf("the lease lapsed at %s and was renewed only at %s, %s", claimed.Format("15:04:05.000"), renewed.Format("15:04:05.000"), why)
			}
			return
		}
		if time.Now().After(claimed) {
			t.Fatalf("the lease lapsed at %s, not renewed, %s", claimed.Format("15:04:05.000"), why)
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
	eng, p, ticket := heldClaim(t, st, lease)
	st.armed.Store(true)
	hb := p.heartbeat(ticket)
	defer hb.stop()
	<-st.hung
	renewedInTime(t, eng, ticket.LeaseUntil, lease, "the renewal sent over a connection that no longer answers being waited for")
}
