package httpfront

import (
	"context"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
)

// RequestCost is what a body is charged per byte of its length.
const RequestCost = requestCost

// HoldRequestBudget takes all of the budget that large requests may take (all but the part
// kept for small ones), as large requests being read would; it returns a func that gives it
// back.
func HoldRequestBudget(t testing.TB) func() {
	return HoldRequestBudgetBut(t, 0)
}

// SetMaxBacklog lowers the bound on one stream's backlog for a test; it returns a func that
// puts it back.
func SetMaxBacklog(n int) func() {
	old := maxBacklog
	maxBacklog = n
	return func() { maxBacklog = old }
}

// SetBacklogBudget replaces BacklogBudget by a pool of total bytes, and the part of each
// stream's backlog it does not count by free, for a test; it returns a func that puts them
// back, and one that says how much of the pool is taken.
func SetBacklogBudget(total int64, free int) (restore func(), used func() int64) {
	oldPool, oldFree := backlogs, freeBacklog
	backlogs, freeBacklog = budget.NewPool(total), free
	pool := backlogs
	return func() { backlogs, freeBacklog = oldPool, oldFree }, func() int64 { n, _ := pool.Used(); return n }
}

// SetWriteTimeout lowers the bound on one write of a stream for a test; it returns a func
// that puts it back.
func SetWriteTimeout(d time.Duration) func() {
	old := writeTimeout
	writeTimeout = d
	return func() { writeTimeout = old }
}

// Backlog is the number of bytes queued, over every session, for open streams whose client
// has not read them yet.
func (h *Handler) Backlog() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.sessions {
		s.mu.Lock()
		sts := make([]*stream, 0, len(s.requests)+1)
		for _, st := range s.requests {
			sts = append(sts, st)
		}
		if s.getSt != nil {
			sts = append(sts, s.getSt)
		}
		s.mu.Unlock()
		for _, st := range sts {
			st.mu.Lock()
			for _, l := range st.queue {
				n += len(l)
			}
			st.mu.Unlock()
		}
	}
	return n
}

// OpenStreams is the number of entries, over every session, that name an open stream: request
// streams by id (with the ids of requests still served after their client hung up) and by
// progress token, streams taking other messages, GET streams.
func (h *Handler) OpenStreams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.sessions {
		s.mu.Lock()
		n += len(s.requests) + len(s.tokens)
		for st := s.newest; st != nil; st = st.older {
			n++
		}
		if s.getSt != nil {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// HoldRequestBudgetBut takes all of the budget that large requests may take but free bytes;
// it returns a func that gives it back.
func HoldRequestBudgetBut(t testing.TB, free int64) func() {
	t.Helper()
	n := requests.Total() - smallReserve - free
	if !requests.Acquire(context.Background(), n, 10*time.Second) {
		t.Fatalf("the budget of requests is in use (%d bytes free)", requests.Total()-RequestBudgetUsed())
	}
	return func() { requests.Release(n) }
}

// HoldAllRequestBudgetBut takes all of the budget but free bytes, the part kept for small
// requests included; it returns a func that gives it back.
func HoldAllRequestBudgetBut(t testing.TB, free int64) func() {
	t.Helper()
	n := requests.Total() - free
	if !requests.Acquire(context.Background(), n, 10*time.Second) {
		t.Fatalf("the budget of requests is in use (%d bytes free)", requests.Total()-RequestBudgetUsed())
	}
	return func() { requests.Release(n) }
}

// RequestBudgetUsed is the part of the budget held now.
func RequestBudgetUsed() int64 {
	now, _ := requests.Used()
	return now
}
