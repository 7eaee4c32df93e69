package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestWatchAcrossStores: a waiter on one store learns from another store's transaction that
// the in-flight intent ended, for every way a claim ends.
func TestWatchAcrossStores(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	sa, sb := openSized(t, schema, 2), openSized(t, schema, 2)
	a := fence.New(sa, fence.Config{Owner: "host-a/1/1"})
	b := fence.New(sb, fence.Config{Owner: "host-b/1/1"})
	ends := []struct {
		name string
		end  func(tk fence.Ticket) error
		want func(adm fence.Admission, err error) bool
	}{
		{"commit", func(tk fence.Ticket) error { _, err := a.Commit(ctx, tk, []byte(`"ok"`)); return err },
			func(adm fence.Admission, err error) bool { return err == nil && !adm.Fresh() }},
		{"release", func(tk fence.Ticket) error { return a.Release(ctx, tk, "declined") },
			func(adm fence.Admission, err error) bool { return err == nil && adm.Fresh() }},
		{"abort", func(tk fence.Ticket) error { return a.Abort(ctx, tk, "timeout") },
			func(_ fence.Admission, err error) bool { return errors.Is(err, fence.ErrPriorFailure) }},
		{"clear", func(tk fence.Ticket) error { _, err := a.Clear(ctx, tk.Intent, "op", "checked"); return err },
			func(adm fence.Admission, err error) bool { return err == nil && adm.Fresh() }},
	}
	for _, c := range ends {
		t.Run(c.name, func(t *testing.T) {
			r := fence.Request{Intent: "watch:" + c.name, Tool: "t"}
			adm, err := a.Prepare(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			ch, stop, err := sb.Watch(ctx, r.Intent)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if _, err := b.Prepare(ctx, r); !errors.Is(err, fence.ErrInFlight) {
				t.Fatalf("before the end: %v", err)
			}
			select {
			case <-ch:
				t.Fatal("woken before the claim ended")
			default:
			}
			if err := c.end(*adm.Ticket); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Fatal("no notification within 10 s")
			}
			if got, err := b.Prepare(ctx, r); !c.want(got, err) {
				t.Fatalf("after the end: %+v %v", got, err)
			}
		})
	}
	var n int
	if err := sa.pool.QueryRow(ctx, "SELECT count(*) FROM effectfence_waiters").Scan(&n); err != nil || n != 0 {
		t.Fatalf("waiters rows left: %d %v", n, err)
	}
}

// TestWatchSurvivesListenerLoss: when the LISTEN connection is terminated, every waiter is
// woken (a notification may have been missed) and the listener reconnects, so later waits are
// notified again.
func TestWatchSurvivesListenerLoss(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	sa, sb := openSized(t, schema, 2), openSized(t, schema, 2)
	a := fence.New(sa, fence.Config{Owner: "host-a/1/1"})
	r := fence.Request{Intent: "watch:listener-loss", Tool: "t"}
	adm, err := a.Prepare(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	ch, stop, err := sb.Watch(ctx, r.Intent)
	if err != nil {
		t.Fatal(err)
	}
	first := sb.listener.pid.Load()
	var ok bool
	if err := admin(t, "").QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", int32(first)).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminating the listener: %v %v", ok, err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("waiters were not woken after the listener was lost")
	}
	stop()
	// The intent is still in flight: wait again, on the new listener.
	ch, stop, err = sb.Watch(ctx, r.Intent)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if now := sb.listener.pid.Load(); now == first || now == 0 {
		t.Fatalf("listener backend %d after reconnect (was %d)", now, first)
	}
	if _, err := a.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after the listener reconnected")
	}
}

// BenchmarkWaitWake measures how a coalescing waiter on another store (another process)
// learns that the holder committed: by the engine's polling back-off (PrepareWait: 2 ms
// doubling to 100 ms) or by Watch (LISTEN/NOTIFY). p50/p90-wake-µs are from the start of the
// holder's Commit to the waiter's answer; waiter-tx/op counts the waiter's database transactions (for notify, registering
// and removing its waiters row included).
//
//	go test -run '^$' -bench WaitWake -benchtime 40x ./pkg/store/postgres/
func BenchmarkWaitWake(b *testing.B) {
	for _, mode := range []string{"poll", "notify"} {
		for _, hold := range []time.Duration{20 * time.Millisecond, 200 * time.Millisecond} {
			b.Run(fmt.Sprintf("%s/hold=%s", mode, hold), func(b *testing.B) {
				schema := testSchema(b)
				ctx := context.Background()
				sa, sb := openSized(b, schema, 2), openSized(b, schema, 2)
				var txs atomic.Int64
				sb.hook = func(stage string, _ uint32) {
					if stage == "begin" || stage == "view" || stage == "waiters" {
						txs.Add(1)
					}
				}
				a := fence.New(sa, fence.Config{Owner: "host-a/1/1"})
				w := fence.New(sb, fence.Config{Owner: "host-b/1/1"})
				wakes := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					r := fence.Request{Intent: fmt.Sprintf("wake:%d", i), Tool: "t"}
					adm, err := a.Prepare(ctx, r)
					if err != nil {
						b.Fatal(err)
					}
					answered := make(chan time.Time, 1)
					go func() {
						var err error
						if mode == "poll" {
							_, err = w.PrepareWait(ctx, r, 10*time.Second)
						} else {
							err = waitNotified(ctx, sb, w, r)
						}
						if err != nil {
							b.Error(err)
						}
						answered <- time.Now()
					}()
					time.Sleep(hold)
					t0 := time.Now()
					if _, err := a.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
						b.Fatal(err)
					}
					wakes = append(wakes, (<-answered).Sub(t0))
				}
				b.StopTimer()
				slices.Sort(wakes)
				b.ReportMetric(float64(wakes[len(wakes)/2].Microseconds()), "p50-wake-µs")
				b.ReportMetric(float64(wakes[len(wakes)*9/10].Microseconds()), "p90-wake-µs")
				b.ReportMetric(float64(txs.Load())/float64(b.N), "waiter-tx/op")
			})
		}
	}
}

// waitNotified is what PrepareWait would do with a Notifier: watch, then ask; on a wake ask
// again, and only if the intent is still in flight watch anew (and ask once more, since an
// end between the answer and the new watch would not wake it).
func waitNotified(ctx context.Context, n Notifier, e *fence.Engine, r fence.Request) error {
	ch, stop, err := n.Watch(ctx, r.Intent)
	if err != nil {
		return err
	}
	defer func() { stop() }()
	answer := func() (bool, error) {
		adm, err := e.Prepare(ctx, r)
		switch {
		case errors.Is(err, fence.ErrInFlight):
			return false, nil
		case err == nil && adm.Fresh():
			return true, errors.New("the waiter was admitted")
		}
		return true, err
	}
	for {
		if done, err := answer(); done {
			return err
		}
		<-ch
		if done, err := answer(); done {
			return err
		}
		stop()
		if ch, stop, err = n.Watch(ctx, r.Intent); err != nil {
			stop = func() {}
			return err
		}
	}
}

// TestListenerStartsInTwoRoundTrips: the listener's connection is pinned to the ledger's
// schema and listening after one round trip (the pin and LISTEN in one simple query), then
// drops old waiters rows in a second; and it is woken by another store's outcome. Counted at
// a netcut proxy, which counts the round trips that ran statements, not a connection's start.
func TestListenerStartsInTwoRoundTrips(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := netcut.NewPostgres(pgHost(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s := openThrough(t, p, testSchema(t))
	before := p.RoundTrips()
	if _, err := s.listen(ctx); err != nil {
		t.Fatal(err)
	}
	if n := p.RoundTrips() - before; n != 2 {
		t.Errorf("the listener's start took %d round trips, want 2 (its pin and LISTEN, then the old waiters dropped)", n)
	}
	other := fence.New(openSchema(t, s.Schema()), fence.Config{})
	r := fence.Request{Intent: "listen:1", Tool: "pay"}
	adm, err := other.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	ch, stop, err := s.Watch(ctx, r.Intent)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := other.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("the waiter was not woken by the other store's commit")
	}
}
