package budget

import "testing"

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
