package fence

import (
	"context"
	"errors"
	"sync"
	"time"
)

// PrepareWait is Prepare that coalesces: when the intent is in flight it waits, up to maxWait,
// for the holder to finish, and then returns the holder's cert (counted as coalesced), or a
// Ticket if the holder released the intent, or the holder's failure. Only if the holder is
// still running when maxWait ends does it return InFlightError. Waiting notices outcomes of
// this process at once and those of other processes by polling the store (2 ms growing to
// 100 ms).
func (e *Engine) PrepareWait(ctx context.Context, req Request, maxWait time.Duration) (Admission, error) {
	c, err := e.validate(req)
	if err != nil {
		return Admission{}, err
	}
	deadline := time.Now().Add(maxWait)
	poll := 2 * time.Millisecond
	waited := false
	for {
		ch, stop := e.watch.add(c.Intent)
		out, adm, err := e.prepare(ctx, &c)
		if !errors.Is(err, ErrInFlight) || !time.Now().Before(deadline) {
			stop()
			e.count(out, err, waited)
			if err != nil {
				return Admission{}, err
			}
			return *adm, nil
		}
		waited = true
		wait := min(poll, time.Until(deadline))
		timer := time.NewTimer(wait)
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			stop()
			e.count(out, err, waited)
			return Admission{}, err
		}
		timer.Stop()
		stop()
		poll = min(poll*2, 100*time.Millisecond)
	}
}

// watchers wakes waiters of an intent when this process records its outcome.
type watchers struct {
	mu sync.Mutex
	m  map[string]*watch
}

type watch struct {
	ch chan struct{}
	n  int
}

func (w *watchers) add(intent string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*watch{}
	}
	x := w.m[intent]
	if x == nil {
		x = &watch{ch: make(chan struct{})}
		w.m[intent] = x
	}
	x.n++
	return x.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		x.n--
		if x.n == 0 && w.m[intent] == x {
			delete(w.m, intent)
		}
	}
}

func (w *watchers) wake(intent string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := w.m[intent]; x != nil {
		close(x.ch)
		delete(w.m, intent)
	}
}
