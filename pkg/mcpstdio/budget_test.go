package mcpstdio_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// hugeCall asks the test server's "huge" tool for a result of size bytes.
func hugeCall(ctx context.Context, s *mcpstdio.Session, size, tag int) (json.RawMessage, error) {
	return s.Call(ctx, "tools/call", json.RawMessage(fmt.Sprintf(`{"name":"huge","arguments":{"size":%d,"tag":%d}}`, size, tag)))
}

// waitUsed waits up to 10 s for the pool to hold exactly want bytes.
func waitUsed(t *testing.T, pool *budget.Pool, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for now, _ := pool.Used(); now != want; now, _ = pool.Used() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d bytes of the answer budget taken, want %d", what, now, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAnswersTakeTheBudget: the child's large answers share the process's budget (here 4 MiB,
// each reserving the whole of it while it is read, then its length). Six 1.5 MiB answers at
// once all arrive; a Call under budget.Hold keeps its answer's share until done; and while
// the budget is full, a large answer waits for room, then is skipped unread: its call fails as
// one that may have run (never ErrNotSent), the tool having run once, and the session reads
// on. Every byte goes back afterwards. (Not parallel: it replaces the process's budget.)
func TestAnswersTakeTheBudget(t *testing.T) {
	pool, restore := mcpstdio.SetAnswerBudget(4<<20, 500*time.Millisecond)
	defer restore()
	cfg, effects, _ := config(t, "")
	s := start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const size = 3 << 19

	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := hugeCall(ctx, s, size, i); err != nil || len(res) < size {
				t.Errorf("one of six large answers at once: %d bytes, %v", len(res), err)
			}
		}()
	}
	wg.Wait()
	if now, most := pool.Used(); now != 0 || most > 4<<20 || most < 1<<20 {
		t.Fatalf("after six answers: %d bytes of the budget taken, at most %d; want 0, and between one answer and the budget", now, most)
	}

	hctx, done := budget.Hold(ctx)
	res, err := hugeCall(hctx, s, size, 6)
	if err != nil {
		t.Fatal(err)
	}
	if now, _ := pool.Used(); now < int64(len(res)) || now > 2<<20 {
		t.Fatalf("a held answer of %d bytes keeps %d bytes of the budget", len(res), now)
	}
	done()
	waitUsed(t, pool, 0, "after the hold was done")

	pool.Acquire(ctx, pool.Total(), 0)
	start := time.Now()
	before := len(mcptest.Effects(effects))
	fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
	defer fcancel()
	_, err = hugeCall(fctx, s, size, 7)
	var rpc *jsonrpc.Error
	if err == nil || errors.Is(err, mcpstdio.ErrNotSent) || errors.As(err, &rpc) || !strings.Contains(err.Error(), "no room") || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("a large answer while the budget was full: %v after %s; want it skipped unread after the wait, the call failed as one that may have run", err, time.Since(start))
	}
	if n := len(mcptest.Effects(effects)) - before; n != 1 {
		t.Fatalf("%d executions of the call whose answer found no room, want 1", n)
	}
	pool.Release(pool.Total())
	if _, err := s.Call(ctx, "ping", json.RawMessage(`{}`)); err != nil {
		t.Fatalf("the session after the skipped answer: %v", err)
	}
	if res, err := hugeCall(ctx, s, size, 8); err != nil || len(res) < size {
		t.Fatalf("a large answer with room again: %d bytes, %v", len(res), err)
	}
	waitUsed(t, pool, 0, "at the end")
}

// A Call that gives up once its large answer was read, but before it was delivered (it waits
// behind a notification whose delivery is slow), gives the answer's share of the budget back
// when the answer is delivered: nobody keeps it.
func TestAnswerOfACallThatGaveUpGoesBack(t *testing.T) {
	pool, restore := mcpstdio.SetAnswerBudget(4<<20, time.Minute)
	defer restore()
	cfg, _, _ := config(t, "")
	entered, release := make(chan struct{}, 1), make(chan struct{})
	cfg.OnNotification = func(method string, _ json.RawMessage) {
		if method == "notifications/tools/list_changed" {
			entered <- struct{}{}
			<-release
		}
	}
	s := start(t, cfg)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the session closes, whatever fails
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go s.CallTool(ctx, "add_tool", json.RawMessage(`{}`))
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the list_changed notification never came")
	}
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	gaveUp := make(chan error, 1)
	go func() { _, err := hugeCall(cctx, s, 3<<19, 1); gaveUp <- err }()
	deadline := time.Now().Add(30 * time.Second)
	for now, _ := pool.Used(); now == 0 || s.Pending() > 0; now, _ = pool.Used() { // read, queued behind the notification
		if time.Now().After(deadline) {
			t.Fatalf("the large answer was never read (%d bytes of the budget taken, %d calls waiting)", now, s.Pending())
		}
		time.Sleep(5 * time.Millisecond)
	}
	ccancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the call that gave up: %v", err)
	}
	unblock()
	waitUsed(t, pool, 0, "once the answer of the call that gave up was delivered")
}
