package fence

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemoryStore keeps the ledger in process memory: nothing survives the process. It is the
// store for tests, for the library's simplest use, and for EFFECTFENCE_LEDGER=memory.
type MemoryStore struct {
	mu      sync.RWMutex
	now     func() time.Time
	wall    bool // now is time.Now (the engine then reads the clock itself: Engine.memWall)
	records recTable
	domains map[string]uint64
	floor   uint64
	token   uint64
	events  []Event
	counts  Counters
	closed  bool
	undo    memUndo // the write transaction's undo log, reused under mu
	wtx     memTx   // the write transaction, reused under mu (it escapes through Tx)
}

// NewMemoryStore returns an empty store using the wall clock.
func NewMemoryStore() *MemoryStore {
	m := NewMemoryStoreClock(time.Now)
	m.wall = true
	return m
}

// NewMemoryStoreClock returns an empty store using now as its clock (for tests of leases).
func NewMemoryStoreClock(now func() time.Time) *MemoryStore {
	m := &MemoryStore{now: now, domains: map[string]uint64{}}
	m.wtx = memTx{memView: (*memView)(m), memUndo: &m.undo}
	return m
}

var errClosed = errors.New("fence: store is closed")

// Update runs fn under the store's lock; an error from fn, a panic in it or the end of its
// goroutine undoes every write it made.
func (m *MemoryStore) Update(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	// Update holds the lock exclusively, so one transaction and its undo log are reused (the
	// log's slices keep their capacity). Their fields are reset one by one, and only those a
	// transaction changes: the transaction's links to the store and its log are set once, in
	// NewMemoryStoreClock. Assigning whole structs copied every pointer in them through the
	// collector's write barrier while it marked (a sixth of a fresh call's barrier work).
	u := &m.undo
	u.recUndo, u.domUndo = u.recUndo[:0], u.domUndo[:0]
	u.floorSaved, u.evSaved, u.cntSaved = false, false, false
	tx := &m.wtx
	if tx.memView == nil { // a MemoryStore not made by a constructor: the wall clock, no records
		tx.memView, tx.memUndo = (*memView)(m), u
		if m.domains == nil {
			m.domains = map[string]uint64{}
		}
	}
	// What the previous transaction read or wrote last is forgotten (it may have been rolled
	// back); its record stays referenced until this transaction's first Get or Put.
	tx.last.ok = false
	tx.at = (*memView)(m).Now()
	// A fn that panics (the engine calls the configured Liveness inside transactions) or ends
	// its goroutine returns no error, but its writes must not stay either: its caller may
	// recover and go on with this store, as the SQLite and PostgreSQL stores roll back then.
	returned := false
	defer func() {
		if !returned {
			tx.rollback()
			u.release()
		}
	}()
	err := fn(tx)
	returned = true
	if err != nil {
		tx.rollback()
	}
	u.release()
	return err
}

// release lets go of what the undo log holds once its transaction is over.
func (u *memUndo) release() {
	if u.evPrev != nil {
		u.evPrev = nil // do not keep old event slices alive
	}
	// The records the undo log held are let go field by field: clear, and a loop the compiler
	// turns into one, went through the collector's bulk barrier while it marked (a
	// transaction logs one or two).
	for i := range u.recUndo {
		u.recUndo[i].key, u.recUndo[i].rec = "", nil
	}
}

// View runs fn under the store's read lock. The read transaction is the store itself, seen
// as a memView: it needs no state of its own, so a View allocates nothing.
func (m *MemoryStore) View(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return errClosed
	}
	return fn((*memView)(m))
}

// Close makes later calls fail.
func (m *MemoryStore) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

// memView is a read transaction: the store itself, whose methods read it and refuse to write.
// Its clock is read when asked.
type memView MemoryStore

// memTx is the write transaction: memView's reads, the writes with their undo log, and one
// clock reading for the whole transaction.
type memTx struct {
	*memView
	at time.Time
	*memUndo
	last lastGet
}

// lastGet is the write transaction's latest read or write of a record: Put of the same intent
// (a claim after its Get, a commit after its Get) takes what it overwrites from here instead
// of looking the intent up again.
type lastGet struct {
	intent string
	rec    *Record // nil: the intent had no record
	at     probe   // where the lookup ended in the records table
	ok     bool    // the fields above are set
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
	rec *Record // what the write replaced; nil: the intent had no record
}

type domUndo struct {
	key string
	had bool
	seq uint64
}

var errReadOnly = errors.New("fence: write in a read-only transaction")

func (t *memTx) rollback() {
	for i := len(t.recUndo) - 1; i >= 0; i-- {
		u := t.recUndo[i]
		if u.rec != nil {
			t.records.put(u.rec)
		} else {
			t.records.remove(u.key)
		}
	}
	for i := len(t.domUndo) - 1; i >= 0; i-- {
		u := t.domUndo[i]
		if u.had {
			t.domains[u.key] = u.seq
		} else {
			delete(t.domains, u.key)
		}
	}
	if t.floorSaved {
		t.floor = t.floorPrev
	}
	if t.evSaved {
		t.events = t.evPrev
	}
	if t.cntSaved {
		t.counts = t.cntPrev
	}
}

// The reads, shared by both kinds of transaction.

func (v *memView) Now() time.Time {
	if v.now == nil { // a MemoryStore not made by a constructor
		return time.Now()
	}
	return v.now()
}

func (v *memView) Get(intent string) (*Record, error) { return v.records.get(intent), nil }

func (v *memView) Scan(f Filter, fn func(*Record) bool) error {
	if err := f.CheckByExpiry(); err != nil {
		return err
	}
	if f.ByExpiry {
		for _, rec := range v.oldest(f) {
			if !fn(rec) {
				break
			}
		}
		return nil
	}
	recs := make([]*Record, 0, v.records.live)
	v.records.each(func(rec *Record) bool {
		if f.Match(rec) {
			recs = append(recs, rec)
		}
		return true
	})
	slices.SortFunc(recs, func(a, b *Record) int { return strings.Compare(a.Intent, b.Intent) })
	for i, rec := range recs {
		if f.Limit > 0 && i >= f.Limit {
			break
		}
		if !fn(rec) {
			break
		}
	}
	return nil
}

// oldest returns the first f.Limit records that f selects in expiry order, the oldest first.
// It keeps the Limit oldest seen so far in a heap whose root is the latest of them, so a
// sweep's batch costs a pass over the table: it sorted every expired record instead, batch
// after batch (a sweep of 20,000 / 40,000 took 0.07-0.18 / 0.46-0.68 s, now 0.04-0.05 /
// 0.27-0.35 s under load; docs/DECISIONS.md).
func (v *memView) oldest(f Filter) []*Record {
	later := func(a, b *Record) bool { return a.ExpiresAt.After(b.ExpiresAt) }
	h := make([]*Record, 0, min(f.Limit, v.records.live))
	v.records.each(func(rec *Record) bool {
		if rec.ExpiresAt.IsZero() || !f.Match(rec) {
			return true
		}
		if len(h) < f.Limit {
			h = append(h, rec)
			for i := len(h) - 1; i > 0; {
				up := (i - 1) / 2
				if !later(h[i], h[up]) {
					break
				}
				h[i], h[up] = h[up], h[i]
				i = up
			}
			return true
		}
		if !later(h[0], rec) {
			return true
		}
		h[0] = rec
		for i := 0; ; {
			top, l, r := i, 2*i+1, 2*i+2
			if l < len(h) && later(h[l], h[top]) {
				top = l
			}
			if r < len(h) && later(h[r], h[top]) {
				top = r
			}
			if top == i {
				break
			}
			h[i], h[top] = h[top], h[i]
			i = top
		}
		return true
	})
	slices.SortFunc(h, func(a, b *Record) int { return a.ExpiresAt.Compare(b.ExpiresAt) })
	return h
}

// CertByHash returns a done record only (the Tx contract; both SQL stores' queries ask for
// state done), and of several (a superseded copy keeps its cert) the first in intent order, as
// PostgreSQL answers, not whichever the table's slot order, new with each store, gives first.
func (v *memView) CertByHash(hash string) (*Record, error) {
	var found *Record
	v.records.each(func(rec *Record) bool {
		if rec.State == StateDone && rec.Cert != nil && rec.Cert.Hash == hash && (found == nil || rec.Intent < found.Intent) {
			found = rec
		}
		return true
	})
	return found, nil
}

func (v *memView) DomainSeq(domain string) (uint64, bool, error) {
	seq, ok := v.domains[domain]
	if !ok {
		return v.floor, false, nil
	}
	return seq, true, nil
}

func (v *memView) DomainFloor() (uint64, error) { return v.floor, nil }

func (v *memView) Events(intent string, fn func(Event) bool) error {
	for _, ev := range v.events {
		if intent != "" && ev.Intent != intent {
			continue
		}
		if !fn(ev) {
			break
		}
	}
	return nil
}

func (v *memView) Counters() (Counters, error) { return v.counts, nil }

// A read transaction refuses every write.

func (v *memView) Put(*Record) error                         { return errReadOnly }
func (v *memView) Delete(string) error                       { return errReadOnly }
func (v *memView) SetDomainSeq(string, uint64) error         { return errReadOnly }
func (v *memView) DeleteDomain(string) error                 { return errReadOnly }
func (v *memView) SetDomainFloor(uint64) error               { return errReadOnly }
func (v *memView) NextToken() (uint64, error)                { return 0, errReadOnly }
func (v *memView) AppendEvent(Event) error                   { return errReadOnly }
func (v *memView) DeleteEventsBefore(time.Time) (int, error) { return 0, errReadOnly }
func (v *memView) AddCounters(Counters) error                { return errReadOnly }

// The write transaction's clock and writes.

func (t *memTx) Now() time.Time { return t.at }

func (t *memTx) Get(intent string) (*Record, error) {
	rec, at := t.records.find(intent)
	t.last = lastGet{intent, rec, at, true}
	return rec, nil
}

func (t *memTx) Put(rec *Record) error {
	var (
		prev *Record
		at   probe
	)
	if t.last.ok && t.last.intent == rec.Intent {
		prev, at = t.last.rec, t.last.at
	} else {
		prev, at = t.records.find(rec.Intent)
	}
	t.recUndo = append(t.recUndo, recUndo{rec.Intent, prev})
	at = t.records.set(rec, prev != nil, at)
	t.last = lastGet{rec.Intent, rec, at, true}
	return nil
}

func (t *memTx) Delete(intent string) error {
	t.last = lastGet{}
	if prev := t.records.remove(intent); prev != nil {
		t.recUndo = append(t.recUndo, recUndo{intent, prev})
	}
	return nil
}

func (t *memTx) SetDomainSeq(domain string, seq uint64) error {
	prev, had := t.domains[domain]
	t.domUndo = append(t.domUndo, domUndo{domain, had, prev})
	t.domains[domain] = seq
	return nil
}

func (t *memTx) DeleteDomain(domain string) error {
	prev, had := t.domains[domain]
	if !had {
		return nil
	}
	t.domUndo = append(t.domUndo, domUndo{domain, true, prev})
	delete(t.domains, domain)
	return nil
}

func (t *memTx) SetDomainFloor(seq uint64) error {
	if !t.floorSaved {
		t.floorSaved, t.floorPrev = true, t.floor
	}
	t.floor = seq
	return nil
}

func (t *memTx) NextToken() (uint64, error) {
	// Never undone: a token handed out in a rolled-back transaction is simply skipped.
	t.token++
	return t.token, nil
}

func (t *memTx) AppendEvent(ev Event) error {
	t.saveEvents()
	t.events = append(t.events, ev)
	return nil
}

func (t *memTx) DeleteEventsBefore(before time.Time) (int, error) {
	t.saveEvents()
	prev := t.events
	kept := make([]Event, 0, len(prev))
	for _, ev := range prev {
		if KeptForever(ev.Kind) || !ev.At.Before(before) {
			kept = append(kept, ev)
		}
	}
	t.events = kept
	return len(prev) - len(kept), nil
}

func (t *memTx) AddCounters(d Counters) error {
	if !t.cntSaved {
		t.cntSaved, t.cntPrev = true, t.counts
	}
	t.counts = t.counts.Add(d)
	return nil
}

func (t *memTx) saveEvents() {
	if !t.evSaved {
		t.evSaved, t.evPrev = true, t.events
	}
}
