package wrap_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// countedStore counts the transactions of a store (countedNotifier: one that notifies).
type countedStore struct {
	fence.Store
	n *atomic.Int64
}

func (s countedStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	s.n.Add(1)
	return s.Store.Update(ctx, fn)
}

func (s countedStore) View(ctx context.Context, fn func(fence.Tx) error) error {
	s.n.Add(1)
	return s.Store.View(ctx, fn)
}

type countedNotifier struct {
	countedStore
	w fence.Notifier
}

func (s countedNotifier) Watch(ctx context.Context, intent string) (<-chan struct{}, func(), error) {
	return s.w.Watch(ctx, intent)
}

// followCost makes n task-augmented duplicates of a call held in flight (slow, until a file
// exists) in another session of the same process (a gateway's), each answered with a task
// that follows it, and measures the ledger's transactions (all of this process's on that
// engine: the followers' and the first call's) and the process's CPU time over window once
// they all follow: transactions, CPU time and the window's length.
func followCost(t *testing.T, ledger string, n int, wait, window time.Duration) (txs int64, cpu, elapsed time.Duration) {
	r := newRig(t)
	led, err := store.Open(context.Background(), store.Options{Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	var count atomic.Int64
	cs := countedStore{led.Store(), &count}
	var st fence.Store = cs
	if w, ok := led.Store().(fence.Notifier); ok {
		st = countedNotifier{cs, w}
	}
	eng := fence.New(st, led.Config())
	shared := wrap.NewShared()
	mk := func(name string) (*wrap.Proxy, *logBuf, chanSink) {
		log, out := &logBuf{}, make(chanSink, 4*n+16)
		p, err := wrap.New(wrap.Options{Command: r.childCmd(), Env: r.env(), Engine: eng, Log: log, Wait: wait, Shared: shared, MaxConcurrent: 4})
		if err != nil {
			t.Fatal(err)
		}
		p.Attach(out)
		t.Cleanup(func() { p.Stop("test over") })
		p.Dispatch([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"` + name + `","version":"1"}}}`))
		<-out
		p.Dispatch([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
		return p, log, out
	}
	first, _, _ := mk("first")
	dups, dupLog, dupOut := mk("dups")
	gate := filepath.Join(r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"cost","until":%q}`, gate)
	first.Dispatch([]byte(`{"jsonrpc":"2.0","id":"first","method":"tools/call","params":{"name":"slow","arguments":` + args + `}}`))
	waitFor(t, "the first call to hold the intent", func() bool {
		s, err := eng.Stats(context.Background())
		return err == nil && s.SinceBoot.Admitted == 1
	})
	for i := range n {
		dups.Dispatch([]byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i+10) + `,"method":"tools/call","params":{"name":"slow","arguments":` + args + `,"task":{"ttl":600000}}}`))
	}
	for range n {
		select {
		case line := <-dupOut:
			if !strings.Contains(string(line), `"status":"working"`) {
				t.Fatalf("a duplicate's answer: %s", line)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("the duplicates never all followed:\n%.3000s", dupLog.String())
		}
	}
	time.Sleep(wait) // every follower in its passes
	cpu0, c0, t0 := cpuTime(), count.Load(), time.Now()
	time.Sleep(window)
	cpu1, c1, el := cpuTime(), count.Load(), time.Since(t0)
	used := cpu1 - cpu0
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r.effectCount() > 1 {
		t.Fatalf("%d executions", r.effectCount())
	}
	return c1 - c0, used, el
}

// TestFollowerLedgerCost measures what followers cost the ledger and the CPU (set
// EFFECTFENCE_FOLLOWER_COST=N for N followers; a measurement, not a check).
func TestFollowerLedgerCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EFFECTFENCE_FOLLOWER_COST"))
	if n <= 0 {
		t.Skip("a measurement: set EFFECTFENCE_FOLLOWER_COST=N")
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			ledger := filepath.Join(t.TempDir(), "ledger.db")
			if kind == "postgres" {
				ledger = pgtest.Ledger(t, "followcost")
			}
			txs, cpu, el := followCost(t, ledger, n, time.Second, 10*time.Second)
			t.Logf("%s: %d followers, --wait 1s: %.0f ledger transactions/s, %.2f CPU cores", kind, n, float64(txs)/el.Seconds(), cpu.Seconds()/el.Seconds())
		})
	}
}

// TestFollowerReadsTheLedgerOnceAPoll: a task that follows an attempt in flight reads the
// ledger about once a second (its pollInterval), however short --wait is. Before, each of its
// passes polled as a duplicate's wait does, 2 ms growing to 100 ms, for as long as the attempt
// ran: about 14 transactions a second per follower at --wait 1s. The bound counts every
// transaction of the window at one a second per follower, and three more each; a loaded
// machine only makes fewer.
func TestFollowerReadsTheLedgerOnceAPoll(t *testing.T) {
	t.Parallel()
	const n = 8
	txs, _, el := followCost(t, filepath.Join(t.TempDir(), "ledger.db"), n, time.Second, 5*time.Second)
	if most := int64(n * (el.Seconds() + 3)); txs > most {
		t.Fatalf("%d followers made %d ledger transactions in %s, want at most %d", n, txs, el.Round(time.Millisecond), most)
	}
}
