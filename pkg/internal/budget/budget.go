// Package budget bounds the memory large things take. Table is the table of large entries
// that the engine's fingerprint cache and the SQLite ledger's decoded-record cache keep beside
// their small ones: direct-mapped slots, read without a lock, whose entries together cost at
// most a byte budget. Pool is the bytes the large messages of a process share.
package budget

import (
	"sync"
	"sync/atomic"
)

// Bits and Slots: a Table has Slots = 2^Bits slots.
const (
	Bits  = 6
	Slots = 1 << Bits
)

// Table holds up to Slots immutable entries. Loads take no lock; every store goes through Put
// or Drop, which keep the count of what the entries cost.
type Table[E any] struct {
	slots [Slots]atomic.Pointer[E]
	cost  func(*E) int // of an entry; 0 for nil

	mu    sync.Mutex
	bytes int // the cost of the entries (guarded by mu)
	next  int // the slot the next eviction looks at first (guarded by mu)
}

// New returns an empty table whose entries cost what cost says (cost(nil) must be 0).
func New[E any](cost func(*E) int) *Table[E] { return &Table[E]{cost: cost} }

// Slot is slot i (taken modulo Slots: a caller picks which bits of its hash index the table).
func (t *Table[E]) Slot(i uint64) *atomic.Pointer[E] { return &t.slots[i%Slots] }

// Bytes is what the entries cost together.
func (t *Table[E]) Bytes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes
}

// Put stores e in s (a slot of t), then evicts other entries, taking the slots in turn from
// where the last eviction stopped, until the entries cost no more than budget.
func (t *Table[E]) Put(s *atomic.Pointer[E], e *E, budget int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bytes += t.cost(e) - t.cost(s.Swap(e))
	for i := 0; t.bytes > budget && i < Slots; i++ {
		v := &t.slots[t.next]
		t.next = (t.next + 1) % Slots
		if v != s {
			t.bytes -= t.cost(v.Swap(nil))
		}
	}
}

// Drop removes e from s if it is still there.
func (t *Table[E]) Drop(s *atomic.Pointer[E], e *E) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.CompareAndSwap(e, nil) {
		t.bytes -= t.cost(e)
	}
}

// Each calls fn with every slot's entry (nil for an empty slot), for tests.
func (t *Table[E]) Each(fn func(*E)) {
	for i := range t.slots {
		fn(t.slots[i].Load())
	}
}
