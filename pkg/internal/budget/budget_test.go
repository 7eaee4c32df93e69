package budget

import (
	"context"
	"testing"
)

type entry struct{ n int }

func cost(e *entry) int {
	if e == nil {
		return 0
	}
	return e.n
}

// Every put keeps the count equal to what the slots hold and within the budget, the entry just
// put stays, and a drop takes out only the entry it names.
func TestPutKeepsTheBudget(t *testing.T) {
	tb := New(cost)
	const limit = 1000
	for i := range 500 {
		s := tb.Slot(uint64(i * 7))
		e := &entry{n: 1 + i%300}
		tb.Put(s, e, limit)
		if s.Load() != e {
			t.Fatalf("put %d: the entry just put was evicted", i)
		}
		sum := 0
		tb.Each(func(e *entry) { sum += cost(e) })
		if sum != tb.Bytes() || sum > limit {
			t.Fatalf("put %d: slots hold %d, count %d, budget %d", i, sum, tb.Bytes(), limit)
		}
	}
	s := tb.Slot(3)
	e := &entry{n: 10}
	tb.Put(s, e, limit)
	before := tb.Bytes()
	tb.Drop(s, &entry{n: 10}) // another entry: nothing happens
	if s.Load() != e || tb.Bytes() != before {
		t.Fatal("Drop removed an entry it did not name")
	}
	tb.Drop(s, e)
	if s.Load() != nil || tb.Bytes() != before-10 {
		t.Fatalf("Drop: slot %v, count %d, want nil and %d", s.Load(), tb.Bytes(), before-10)
	}
}

// A taker that leaves a reserve never takes it, nor more than the pool but the reserve;
// takers that need not leave it take it.
func TestAcquireLeavingKeepsTheReserve(t *testing.T) {
	p := NewPool(100)
	ctx := context.Background()
	if !p.AcquireLeaving(ctx, 500, 30, 0) {
		t.Fatal("a taker leaving 30 of an empty pool of 100 took nothing")
	}
	if now, _ := p.Used(); now != 70 {
		t.Fatalf("it took %d, want 70 (all but the reserve)", now)
	}
	if p.AcquireLeaving(ctx, 1, 30, 0) {
		t.Fatal("a second taker leaving 30 took part of the reserve")
	}
	if !p.Acquire(ctx, 30, 0) {
		t.Fatal("a taker that need not leave the reserve could not take it")
	}
	p.Release(100)
	if now, _ := p.Used(); now != 0 {
		t.Fatalf("%d taken once all was given back", now)
	}
}
