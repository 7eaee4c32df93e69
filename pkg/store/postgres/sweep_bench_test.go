package postgres

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// putBacklog writes n done records that expired an hour ago or more (each a millisecond apart,
// in an order unrelated to their intents), then young done and failed records the sweep must
// keep, a thousand records per transaction, through Tx.Put. Each done record holds a result of
// resultBytes.
func putBacklog(tb testing.TB, st fence.Store, prefix string, n, young, failed, resultBytes int) {
	tb.Helper()
	ctx := context.Background()
	result := []byte(`"` + strings.Repeat("r", max(resultBytes-2, 0)) + `"`)
	type spec struct {
		intent string
		state  fence.State
		expiry time.Duration // from now
	}
	var all []spec
	for i := range n {
		// A multiplicative step scatters expiry order against intent order.
		all = append(all, spec{fmt.Sprintf("%s:old:%06d", prefix, i), fence.StateDone, -time.Hour - time.Duration((i*7919)%n)*time.Millisecond})
	}
	for i := range young {
		all = append(all, spec{fmt.Sprintf("%s:young:%06d", prefix, i), fence.StateDone, time.Hour})
	}
	for i := range failed {
		all = append(all, spec{fmt.Sprintf("%s:failed:%06d", prefix, i), fence.StateFailed, 0})
	}
	for len(all) > 0 {
		chunk := all[:min(1000, len(all))]
		all = all[len(chunk):]
		err := st.Update(ctx, func(tx fence.Tx) error {
			now := tx.Now()
			for _, s := range chunk {
				rec := &fence.Record{Intent: s.intent, State: s.state, Fingerprint: "fp", Token: 1, Tool: "send", Args: []byte(`{"to":"x"}`),
					ClaimedAt: now, LeaseUntil: now.Add(time.Minute), UpdatedAt: now}
				if s.state == fence.StateDone {
					rec.ExpiresAt = now.Add(s.expiry)
					rec.Cert = &fence.Cert{Intent: s.intent, Tool: "send", Args: rec.Args, Result: result, Hash: "h-" + s.intent}
				}
				if err := tx.Put(rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkSweepBacklog times Engine.Sweep of a backlog of expired outcomes (with a tenth as
// many young outcomes and a hundredth as many failed records, which it keeps) on each store:
// memory, a SQLite file, PostgreSQL. Each op writes the backlog (untimed) and sweeps it;
// "roundtrips/op" counts PostgreSQL's round trips during the sweep.
//
//	go test -run '^$' -bench SweepBacklog -benchtime 1x -count 3 ./pkg/store/postgres/
func BenchmarkSweepBacklog(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{20000, 40000} {
		young, failed := n/10, n/100
		sweep := func(b *testing.B, st fence.Store, trips *atomic.Int64) {
			eng := fence.New(st, fence.Config{})
			counted := trips != nil
			if !counted {
				trips = new(atomic.Int64)
			}
			var rts int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				putBacklog(b, st, fmt.Sprint(i), n, young, failed, 1024)
				t0 := trips.Load()
				b.StartTimer()
				got, err := eng.Sweep(ctx)
				b.StopTimer()
				rts += trips.Load() - t0
				if err != nil || got != n {
					b.Fatalf("swept %d, %v; want %d", got, err, n)
				}
			}
			if counted {
				b.ReportMetric(float64(rts)/float64(b.N), "roundtrips/op")
			}
			b.ReportMetric(float64(n), "records/op")
		}
		b.Run(fmt.Sprintf("memory/%d", n), func(b *testing.B) {
			sweep(b, fence.NewMemoryStore(), nil)
		})
		b.Run(fmt.Sprintf("sqlite/%d", n), func(b *testing.B) {
			st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "sweep.db"), sqlite.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			sweep(b, st, nil)
		})
		b.Run(fmt.Sprintf("postgres/%d", n), func(b *testing.B) {
			var trips atomic.Int64
			st, err := Open(ctx, Config{URL: testURL(b), Schema: testSchema(b), wrapConn: func(c net.Conn) net.Conn {
				return &tripConn{Conn: c, trips: &trips}
			}})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			sweep(b, st, &trips)
		})
	}
}
