package httpfront

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
)

// A body charged the most a body may be (one of 30 MiB, or one past 1 MiB without a
// Content-Length) takes its charge while small calls hold some of the budget: before, charged
// up to all the budget but the part kept for small bodies, it waited until no other request
// held any, so one small call running a slow tool kept it waiting out --body-timeout (503).
func TestLargeBodyWaitsOnlyForLargeOnes(t *testing.T) {
	pool := budget.NewPool(RequestBudget)
	small := &bodyMeter{pool: pool, ctx: context.Background(), r: strings.NewReader(`{"jsonrpc":"2.0"}`), wait: time.Second, size: 1 << 10}
	if !small.take(1 << 10) {
		t.Fatal("a 1 KiB body found no room in an empty budget")
	}
	for _, size := range []int64{30 << 20, -1} {
		large := &bodyMeter{pool: pool, ctx: context.Background(), wait: 2 * time.Second, size: size}
		n := size
		if size < 0 {
			n = maxBody // past 1 MiB without a Content-Length: charged for the most it may be
		}
		if !large.take(n) {
			t.Fatalf("a body of %d bytes (declared %d) found no room while a 1 KiB call held %d bytes of %d MiB", n, size, small.held, RequestBudget>>20)
		}
		if left := pool.Total() - large.held - small.held; left < smallReserve {
			t.Fatalf("the large body left %d bytes free, less than the %d kept for small ones", left, smallReserve)
		}
		pool.Release(large.held)
	}
}
