package fence

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"
)

// MemoryStore keeps the ledger in process memory: nothing survives the process. It is the
// store for tests, for the library's simplest use, and for EFFECTFENCE_LEDGER=memory.
type MemoryStore struct {
	mu      sync.RWMutex
	now     func() time.Time
	records map[string]*Record
	domains map[string]uint64
	floor   uint64
	token   uint64
	events  []Event
	counts  Counters
	closed  bool
	undo    memUndo // the write transaction's undo log, reused under mu
	wtx     memTx   // the write transaction, reused under mu (it escapes through Tx)
}

// readTxs recycles read transactions: a memTx handed out as a Tx escapes to the heap.
var readTxs = sync.Pool{New: func() any { return new(memTx) }}

// NewMemoryStore returns an empty store using the wall clock.
func NewMemoryStore() *MemoryStore { return NewMemoryStoreClock(time.Now) }

// NewMemoryStoreClock returns an empty store using now as its clock (for tests of leases).
func NewMemoryStoreClock(now func() time.Time) *MemoryStore {
	return &MemoryStore{now: now, records: map[string]*Record{}, domains: map[string]uint64{}}
}

var errClosed = errors.New("fence: store is closed")

// Update runs fn under the store's lock; an error from fn undoes every write it made.
func (m *MemoryStore) Update(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	// Update holds the lock exclusively, so one undo log is reused (its slices keep their
	// capacity).
	u := &m.undo
	*u = memUndo{recUndo: u.recUndo[:0], domUndo: u.domUndo[:0]}
	tx := &m.wtx
	*tx = memTx{m: m, now: m.now(), write: true, memUndo: u}
	err := fn(tx)
	if err != nil {
		tx.rollback()
	}
	*tx = memTx{}
	u.evPrev = nil // do not keep old event slices alive
	clear(u.recUndo)
	return err
}

// View runs fn under the store's read lock.
func (m *MemoryStore) View(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return errClosed
	}
	tx := readTxs.Get().(*memTx)
	*tx = memTx{m: m, now: m.now()}
	err := fn(tx)
	*tx = memTx{}
	readTxs.Put(tx)
	return err
}

// Close makes later calls fail.
func (m *MemoryStore) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

type memTx struct {
	m     *MemoryStore
	now   time.Time
	write bool
	*memUndo
}

// memUndo is the undo log of a write transaction: what each write overwrote, restored in
// reverse on error. Scalars are saved once, at their first write.
type memUndo struct {
	recUndo    []recUndo
	domUndo    []domUndo
	floorSaved bool
	floorPrev  uint64
	evSaved    bool
	evPrev     []Event
	cntSaved   bool
	cntPrev    Counters
}

type recUndo struct {
	key string
	had bool
	rec *Record
}

type domUndo struct {
	key string
	had bool
	seq uint64
}

var errReadOnly = errors.New("fence: write in a read-only transaction")

func (t *memTx) rollback() {
	m := t.m
	for i := len(t.recUndo) - 1; i >= 0; i-- {
		u := t.recUndo[i]
		if u.had {
			m.records[u.key] = u.rec
		} else {
			delete(m.records, u.key)
		}
	}
	for i := len(t.domUndo) - 1; i >= 0; i-- {
		u := t.domUndo[i]
		if u.had {
			m.domains[u.key] = u.seq
		} else {
			delete(m.domains, u.key)
		}
	}
	if t.floorSaved {
		m.floor = t.floorPrev
	}
	if t.evSaved {
		m.events = t.evPrev
	}
	if t.cntSaved {
		m.counts = t.cntPrev
	}
}

func (t *memTx) Now() time.Time { return t.now }

func (t *memTx) Get(intent string) (*Record, error) { return t.m.records[intent], nil }

func (t *memTx) Put(rec *Record) error {
	if !t.write {
		return errReadOnly
	}
	prev, had := t.m.records[rec.Intent]
	t.recUndo = append(t.recUndo, recUndo{rec.Intent, had, prev})
	t.m.records[rec.Intent] = rec
	return nil
}

func (t *memTx) Delete(intent string) error {
	if !t.write {
		return errReadOnly
	}
	prev, had := t.m.records[intent]
	if !had {
		return nil
	}
	t.recUndo = append(t.recUndo, recUndo{intent, true, prev})
	delete(t.m.records, intent)
	return nil
}

func (t *memTx) Scan(f Filter, fn func(*Record) bool) error {
	keys := make([]string, 0, len(t.m.records))
	for k, rec := range t.m.records {
		if f.Match(rec) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for i, k := range keys {
		if f.Limit > 0 && i >= f.Limit {
			break
		}
		if !fn(t.m.records[k]) {
			break
		}
	}
	return nil
}

func (t *memTx) CertByHash(hash string) (*Record, error) {
	for _, rec := range t.m.records {
		if rec.Cert != nil && rec.Cert.Hash == hash {
			return rec, nil
		}
	}
	return nil, nil
}

func (t *memTx) DomainSeq(domain string) (uint64, bool, error) {
	seq, ok := t.m.domains[domain]
	if !ok {
		return t.m.floor, false, nil
	}
	return seq, true, nil
}

func (t *memTx) SetDomainSeq(domain string, seq uint64) error {
	if !t.write {
		return errReadOnly
	}
	prev, had := t.m.domains[domain]
	t.domUndo = append(t.domUndo, domUndo{domain, had, prev})
	t.m.domains[domain] = seq
	return nil
}

func (t *memTx) DeleteDomain(domain string) error {
	if !t.write {
		return errReadOnly
	}
	prev, had := t.m.domains[domain]
	if !had {
		return nil
	}
	t.domUndo = append(t.domUndo, domUndo{domain, true, prev})
	delete(t.m.domains, domain)
	return nil
}

func (t *memTx) DomainFloor() (uint64, error) { return t.m.floor, nil }

func (t *memTx) SetDomainFloor(seq uint64) error {
	if !t.write {
		return errReadOnly
	}
	if !t.floorSaved {
		t.floorSaved, t.floorPrev = true, t.m.floor
	}
	t.m.floor = seq
	return nil
}

func (t *memTx) NextToken() (uint64, error) {
	if !t.write {
		return 0, errReadOnly
	}
	// Never undone: a token handed out in a rolled-back transaction is simply skipped.
	t.m.token++
	return t.m.token, nil
}

func (t *memTx) AppendEvent(ev Event) error {
	if !t.write {
		return errReadOnly
	}
	t.saveEvents()
	t.m.events = append(t.m.events, ev)
	return nil
}

func (t *memTx) Events(intent string, fn func(Event) bool) error {
	for _, ev := range t.m.events {
		if intent != "" && ev.Intent != intent {
			continue
		}
		if !fn(ev) {
			break
		}
	}
	return nil
}

func (t *memTx) DeleteEventsBefore(before time.Time) (int, error) {
	if !t.write {
		return 0, errReadOnly
	}
	t.saveEvents()
	prev := t.m.events
	kept := make([]Event, 0, len(prev))
	for _, ev := range prev {
		if KeptForever(ev.Kind) || !ev.At.Before(before) {
			kept = append(kept, ev)
		}
	}
	t.m.events = kept
	return len(prev) - len(kept), nil
}

func (t *memTx) AddCounters(d Counters) error {
	if !t.write {
		return errReadOnly
	}
	if !t.cntSaved {
		t.cntSaved, t.cntPrev = true, t.m.counts
	}
	t.m.counts = t.m.counts.Add(d)
	return nil
}

func (t *memTx) Counters() (Counters, error) { return t.m.counts, nil }

func (t *memTx) saveEvents() {
	if !t.evSaved {
		t.evSaved, t.evPrev = true, t.m.events
	}
}
