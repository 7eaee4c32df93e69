package fence

import "hash/maphash"

// recTable holds the memory store's records by intent: an open-addressing table with linear
// probing whose slots are a hash and a record pointer, the key being the record's own Intent.
// Against a map[string]*Record it keeps one pointer per slot instead of two (the collector
// follows no key pointers: the intents are reached through their records, and an insertion
// while it marks takes one write barrier, not two), it grows by moving slots with their stored
// hashes (a map re-reads every key), and a write transaction's Put after its Get of the same
// intent lands in the slot that Get found, without hashing or probing again. See
// docs/DECISIONS.md for what this measured.
//
// A record is never changed once it is in the table (the engine copies a record to change
// it): its Intent is the slot's key.
//
// A slot is live (rec set), empty (rec nil, hash 0) or a tombstone (rec nil, hash 1): a
// deleted record leaves a tombstone, because a probe stops at the first empty slot and the
// records after it in its run must still be found. Growth and a rehash drop the tombstones.
// The table is never more than three quarters full of live slots and tombstones, so every
// probe meets an empty slot.
//
// The zero table is empty and usable: its seed is made at the first insertion.
type recTable struct {
	slots []recSlot // a power of two long, or nil
	live  int       // live slots
	used  int       // live slots and tombstones
	seed  maphash.Seed
}

type recSlot struct {
	hash uint64
	rec  *Record
}

const (
	recTableMin = 8
	tombstone   = 1 // the hash field of a deleted slot
)

// probe is where a lookup ended: the slot of the record it found, or else the slot an
// insertion of its intent takes (the first tombstone of the run, or the empty slot that ended
// it); -1 in an empty table. It stays true until the table is next written.
type probe struct {
	hash uint64
	slot int
}

// find returns the record of intent and where its probe ended.
func (t *recTable) find(intent string) (*Record, probe) {
	if t.slots == nil {
		return nil, probe{slot: -1}
	}
	h := maphash.String(t.seed, intent)
	mask := len(t.slots) - 1
	ins := -1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.rec == nil {
			if ins < 0 {
				ins = i
			}
			if s.hash == 0 {
				return nil, probe{h, ins}
			}
			continue
		}
		if s.hash == h && s.rec.Intent == intent {
			return s.rec, probe{h, i}
		}
	}
}

// get returns the record of intent, or nil. A table of the first size (six records at most)
// is searched whole by comparing intents, without hashing (as Go's maps do while small).
func (t *recTable) get(intent string) *Record {
	if t.live == 0 {
		return nil
	}
	if len(t.slots) == recTableMin {
		for i := range t.slots {
			if rec := t.slots[i].rec; rec != nil && rec.Intent == intent {
				return rec
			}
		}
		return nil
	}
	rec, _ := t.find(intent)
	return rec
}

// set stores rec, whose intent find last looked up with the answer had and p, with no write
// to the table since; it returns where rec now is.
func (t *recTable) set(rec *Record, had bool, p probe) probe {
	if had {
		t.slots[p.slot].rec = rec
		return p
	}
	switch {
	case p.slot < 0: // the table has no slots yet
		t.seed = maphash.MakeSeed()
		t.slots = make([]recSlot, recTableMin)
		p.hash = maphash.String(t.seed, rec.Intent)
		p.slot = t.free(p.hash)
		t.used++
	case t.slots[p.slot].hash == tombstone: // taken over: used stays
	default: // an empty slot: the table fills up by one
		if (t.used+1)*4 > len(t.slots)*3 {
			t.resize()
			p.slot = t.free(p.hash)
		}
		t.used++
	}
	t.slots[p.slot] = recSlot{p.hash, rec}
	t.live++
	return p
}

// put stores rec (the undo of a transaction: no probe of its own to reuse).
func (t *recTable) put(rec *Record) {
	prev, p := t.find(rec.Intent)
	t.set(rec, prev != nil, p)
}

// remove deletes the record of intent and returns it, or nil if there was none.
func (t *recTable) remove(intent string) *Record {
	if t.live == 0 {
		return nil
	}
	rec, p := t.find(intent)
	if rec == nil {
		return nil
	}
	t.live--
	mask := len(t.slots) - 1
	if next := t.slots[(p.slot+1)&mask]; next.rec != nil || next.hash != 0 {
		t.slots[p.slot] = recSlot{hash: tombstone}
		return rec
	}
	// The next slot is empty, so no probe passes this one: it and the tombstones before it
	// become empty.
	for i := p.slot; ; i = (i - 1) & mask {
		t.slots[i] = recSlot{}
		t.used--
		if prev := t.slots[(i-1)&mask]; prev.rec != nil || prev.hash != tombstone {
			return rec
		}
	}
}

// free returns the first slot of h's run that holds no record (after a resize there are no
// tombstones, so it is empty).
func (t *recTable) free(h uint64) int {
	mask := len(t.slots) - 1
	i := int(h) & mask
	for t.slots[i].rec != nil {
		i = (i + 1) & mask
	}
	return i
}

// resize moves the live slots, with their hashes, into a table twice as long, or as long if
// tombstones took half of it.
func (t *recTable) resize() {
	n := len(t.slots)
	if (t.live+1)*2 > n {
		n *= 2
	}
	old := t.slots
	t.slots = make([]recSlot, n)
	for _, s := range old {
		if s.rec != nil {
			t.slots[t.free(s.hash)] = s
		}
	}
	t.used = t.live
}

// each calls fn for every record, in no particular order, until fn returns false.
func (t *recTable) each(fn func(*Record) bool) {
	for _, s := range t.slots {
		if s.rec != nil && !fn(s.rec) {
			return
		}
	}
}
