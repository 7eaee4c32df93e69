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
	n = min(n, p.total)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		if p.free >= n {
			p.free -= n
			p.least = min(p.least, p.free)
			p.mu.Unlock()
			return true
		}
		more := p.more
		p.mu.Unlock()
		select {
		case <-more:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
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
