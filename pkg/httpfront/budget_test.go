package httpfront_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// RequestBudget: while large requests being handled hold the whole budget, a small call runs
// at once, and a call whose body passes 1 MiB waits for room up to the body's bound, then is
// refused with 503 and Retry-After, unread: nothing ran, nothing reached the ledger. Sent
// again once there is room, it runs once. (Not parallel: it holds the process's budget.)
func TestLargeRequestsWaitForTheBudget(t *testing.T) {
	// The bound is also how long the large body may take to arrive when it is sent again:
	// 500 ms was too short for 2 MiB under CI's load (-race, every package at once): 408.
	const bound = 2 * time.Second
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.BodyTimeout = bound })
	sid := g.open(nil)
	large := call(3, "charge", `{"amount":7,"note":"`+strings.Repeat("n", 2<<20)+`"}`)

	release := httpfront.HoldRequestBudget()
	defer func() { release() }()
	if r := g.mustPost(sid, nil, call(2, "charge", `{"amount":5}`)); r.status != http.StatusOK || strings.Contains(r.raw[0], "error") {
		t.Fatalf("a small call with the budget full: %d %v; want it run", r.status, r.raw)
	}
	start := time.Now()
	r, err := g.post(context.Background(), sid, nil, large)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || took < bound {
		t.Fatalf("a large call with the budget full: %d (Retry-After %q) after %s; want 503 after %s", r.status, r.header.Get("Retry-After"), took, bound)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(mcptest.Effects(g.effects)); n != 1 {
		t.Fatalf("%d executions, want 1 (the small call's)", n)
	}
	release()
	release = func() {}
	if r := g.mustPost(sid, nil, large); r.status != http.StatusOK || strings.Contains(r.raw[0], `"error"`) || strings.Contains(r.raw[0], "replayed") {
		t.Fatalf("the large call sent again with room: %d %.300v; want it run", r.status, r.raw)
	}
	if n := len(mcptest.Effects(g.effects)); n != 2 {
		t.Fatalf("%d executions, want 2", n)
	}
}
