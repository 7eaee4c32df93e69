package httpfront

import (
	"context"
	"time"
)

// HoldRequestBudget takes the whole budget of large requests, as requests being read would;
// it returns a func that gives it back.
func HoldRequestBudget() func() {
	n := requests.Total()
	requests.Acquire(context.Background(), n, 0)
	return func() { requests.Release(n) }
}

// SetMaxBacklog lowers the bound on one stream's backlog for a test; it returns a func that
// puts it back.
func SetMaxBacklog(n int) func() {
	old := maxBacklog
	maxBacklog = n
	return func() { maxBacklog = old }
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

// HoldRequestBudgetBut takes all of the budget of large requests but free bytes; it returns a
// func that gives it back.
func HoldRequestBudgetBut(free int64) func() {
	n := requests.Total() - free
	requests.Acquire(context.Background(), n, 0)
	return func() { requests.Release(n) }
}

// RequestBudgetUsed is the part of the budget of large requests held now.
func RequestBudgetUsed() int64 {
	now, _ := requests.Used()
	return now
}
