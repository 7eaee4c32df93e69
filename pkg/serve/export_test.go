package serve

import (
	"context"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
)

// SetMaxMessage lowers the bound on one client message for a test; it returns a func that
// puts it back.
func SetMaxMessage(n int) func() {
	old := maxMessage
	maxMessage = n
	return func() { maxMessage = old }
}

// SetRequestBudget replaces the process's RequestBudget by a pool of total bytes and the wait
// for room in it by wait, for the servers that start serving after it in a test; it returns
// the pool and a func that puts both back.
func SetRequestBudget(total int64, wait time.Duration) (*budget.Pool, func()) {
	oldPool, oldWait := requests, requestWait
	requests, requestWait = budget.NewPool(total), wait
	return requests, func() { requests, requestWait = oldPool, oldWait }
}

// SessionOf returns the stdio session's context a request's context (or one derived from it,
// even by context.WithoutCancel) carries, or nil outside Serve.
func SessionOf(ctx context.Context) context.Context {
	session, _ := ctx.Value(sessionKey{}).(context.Context)
	return session
}
