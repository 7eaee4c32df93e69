package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestLargeCallsWaitForTheRequestBudget: while large messages being served hold the whole
// request budget, a large call is not read past its first MiB; after the wait it is skipped
// unread and answered with a JSON-RPC error under its id: nothing ran, nothing reached the
// ledger. Sent again with room it is served, and once answered it holds nothing. (Not
// parallel: it replaces the process's request budget.)
func TestLargeCallsWaitForTheRequestBudget(t *testing.T) {
	const wait = 500 * time.Millisecond
	pool, restore := serve.SetRequestBudget(4<<20, wait)
	defer restore()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{MaxArgBytes: 4 << 20})
	prepare := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"big","tool":"upload","args":{"blob":"%s"}}}}`, id, strings.Repeat("b", 2<<20))
	}

	pool.Acquire(context.Background(), pool.Total(), 0)
	refused := c.waitFor("1")
	start := time.Now()
	go c.in.Write([]byte(prepare(1) + "\n"))
	raw := recv(t, refused, "a large call while the budget was full", 30*time.Second)
	var r struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Error == nil || r.Error.Code != -32603 || !strings.Contains(r.Error.Message, "nothing ran") || time.Since(start) < wait {
		t.Fatalf("a large call while the budget was full: %s after %s; want a JSON-RPC error saying nothing ran, after %s", raw, time.Since(start), wait)
	}
	if rec, err := eng.Status(context.Background(), "big"); err != nil || rec.State != fence.StateNone {
		t.Fatalf("the intent of the call refused unread: %+v, %v; want no record", rec, err)
	}
	pool.Release(pool.Total())

	var p serve.PrepareResult
	if toolResult(t, recv(t, c.sendLine("2", prepare(2)), "the large call sent again", 30*time.Second), &p) || p.Status != serve.StatusFresh {
		t.Fatalf("the large call sent again with room: %+v", p)
	}
	deadline := time.Now().Add(10 * time.Second) // given back just after the answer is written
	for now, most := pool.Used(); now != 0 || most != pool.Total(); now, most = pool.Used() {
		if time.Now().After(deadline) {
			t.Fatalf("the budget once the call was answered: %d taken, at most %d; want 0, and all of it while it was read", now, most)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
