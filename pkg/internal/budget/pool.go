package budget

import (
	"context"
	"sync"
	"time"
)

// Pool is a number of bytes shared by the large messages a process holds at once: Acquire
// waits for room, Release gives it back.
type Pool struct {
	mu    sync.Mutex
	total int64
	free  int64
	least int64         // the least free there has been
	more  chan struct{} // closed and replaced whenever bytes are given back
}

// NewPool returns a pool of total bytes.
func NewPool(total int64) *Pool {
	return &Pool{total: total, free: total, least: total, more: make(chan struct{})}
}

// Total is the pool's size.
func (p *Pool) Total() int64 { return p.total }

// Acquire takes n bytes (at most the whole pool), waiting until wait has passed or ctx ends.
// It reports whether it took them.
func (p *Pool) Acquire(ctx context.Context, n int64, wait time.Duration) bool {
	return p.AcquireLeaving(ctx, n, 0, wait)
}

// AcquireLeaving is Acquire for a taker that must leave reserve bytes free for others (a
// part of the pool kept for small messages): it takes n bytes (at most the pool but
// reserve) only while reserve bytes are then still free.
func (p *Pool) AcquireLeaving(ctx context.Context, n, reserve int64, wait time.Duration) bool {
	ok, _ := p.AcquireLeavingWaited(ctx, n, reserve, wait)
	return ok
}

// AcquireLeavingWaited is AcquireLeaving that also says how long it waited for room: zero
// when it took the bytes at once.
func (p *Pool) AcquireLeavingWaited(ctx context.Context, n, reserve int64, wait time.Duration) (bool, time.Duration) {
	n = min(n, p.total-reserve)
	var start time.Time
	var deadline *time.Timer
	for {
		p.mu.Lock()
		if p.free-n >= reserve {
			p.free -= n
			p.least = min(p.least, p.free)
			p.mu.Unlock()
			if deadline == nil {
				return true, 0
			}
			deadline.Stop()
			return true, time.Since(start)
		}
		more := p.more
		p.mu.Unlock()
		if deadline == nil {
			start, deadline = time.Now(), time.NewTimer(wait)
		}
		select {
		case <-more:
		case <-deadline.C:
			return false, time.Since(start)
		case <-ctx.Done():
			deadline.Stop()
			return false, time.Since(start)
		}
	}
}

// Release gives n bytes back.
func (p *Pool) Release(n int64) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	p.free += n
	close(p.more)
	p.more = make(chan struct{})
	p.mu.Unlock()
}

// Used is what is taken now, and the most that was taken at once.
func (p *Pool) Used() (now, most int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total - p.free, p.total - p.least
}

// holdKey marks a context whose caller keeps what the messages it receives took of their
// pools until it is done with them (Hold).
type holdKey struct{}

// hold is what the messages of one caller keep until it is done with them.
type hold struct {
	mu    sync.Mutex
	kept  []held
	ended bool // done was called: what comes later is given back at once
}

type held struct {
	p *Pool
	n int64
}

// Hold returns a context under which a message's share of its pool (Keep) is kept after the
// call that read it returns, until done is called: for a caller that goes on holding the
// message (recording it, answering with it), so the memory it takes stays within the pool.
// A transport-agnostic caller (the proxy core) holds whatever its back end's messages take.
func Hold(ctx context.Context) (_ context.Context, done func()) {
	h := &hold{}
	return context.WithValue(ctx, holdKey{}, h), func() {
		h.mu.Lock()
		kept := h.kept
		h.kept, h.ended = nil, true
		h.mu.Unlock()
		for _, k := range kept {
			k.p.Release(k.n)
		}
	}
}

// Keep hands n bytes taken from p to the hold of ctx (see Hold), reporting whether there was
// one still open; if not, the caller gives them back itself.
func (p *Pool) Keep(ctx context.Context, n int64) bool {
	if n <= 0 {
		return false // most messages are small and take nothing: no walk up ctx's chain
	}
	h, ok := ctx.Value(holdKey{}).(*hold)
	if !ok {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return false
	}
	h.kept = append(h.kept, held{p, n})
	return true
}
