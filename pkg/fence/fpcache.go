package fence

import (
	"bytes"
	"hash/maphash"
	"math/bits"
	"sync/atomic"

	"github.com/effectfence/effectfence/pkg/internal/budget"
)

// fpCache remembers the canonical arguments and fingerprint of recent calls by their exact
// bytes, so that a retry sent byte for byte again (the common case) skips canonicalisation.
// A hit is confirmed by comparing the full tool and argument bytes, never by hash alone.
//
// It is direct-mapped: a call's hash picks one slot, and a newer call with the same slot
// replaces the older one (a miss only costs canonicalisation). Slots are atomic pointers to
// immutable entries, so a lookup takes no lock.
//
// Arguments over fpCacheMaxBytes (up to fpBigMaxBytes) go to big, a smaller table whose entries
// (raw and canonical bytes) hold at most fpBigBudget bytes together: a put that would go over
// it first evicts other big entries. Canonicalising and hashing 32 KB of arguments costs a
// replay of a large call more than the rest of it.
type fpCache struct {
	seed  maphash.Seed
	slots [fpCacheSlots]atomic.Pointer[fpEntry]
	big   *budget.Table[fpEntry]
}

type fpEntry struct {
	tool      string
	raw       []byte
	canonical []byte
	fp        string
}

const (
	fpCacheBits     = 12
	fpCacheSlots    = 1 << fpCacheBits
	fpCacheMaxBytes = 4096 // larger arguments go to big

	fpBigBudget   = 8 << 20
	fpBigMaxBytes = 1 << 20 // larger arguments are not cached, nor an entry over a quarter of the budget
)

// cost is what an entry of big counts against fpBigBudget.
func (e *fpEntry) cost() int {
	if e == nil {
		return 0
	}
	return len(e.raw) + len(e.canonical)
}

func newFPCache() *fpCache {
	return &fpCache{seed: maphash.MakeSeed(), big: budget.New((*fpEntry).cost)}
}

// hash picks the slots of a call: its top bits index slots or big.
func (f *fpCache) hash(tool string, raw []byte) uint64 {
	// The arguments are hashed whole; the tool, a short name, only by its length and its
	// first and last eight bytes, read as words (a second maphash call cost a tenth of a
	// replay). Two tools that differ only in between share a slot for the same arguments: a
	// miss, never a wrong hit.
	var first, last uint64
	switch n := len(tool); {
	case n >= 8:
		first, last = le64(tool), le64(tool[n-8:])
	case n >= 4:
		first = uint64(le32(tool)) | uint64(le32(tool[n-4:]))<<32
	default:
		for i := 0; i < n; i++ {
			first |= uint64(tool[i]) << (8 * i)
		}
	}
	t := (first ^ bits.RotateLeft64(last, 29) ^ uint64(len(tool))<<56) * 0x9e3779b97f4a7c15
	return maphash.Bytes(f.seed, raw) ^ t
}

// slotOf is the slot of a call of hash h with n bytes of arguments.
func (f *fpCache) slotOf(h uint64, n int) *atomic.Pointer[fpEntry] {
	if n > fpCacheMaxBytes {
		return f.big.Slot(h >> (64 - budget.Bits))
	}
	return &f.slots[h>>(64-fpCacheBits)]
}

// get returns the canonical arguments and fingerprint cached for the call, and the slot the
// call maps to, for put after a miss (the arguments are hashed once per call); the slot is nil
// for arguments too large to cache.
func (f *fpCache) get(tool string, raw []byte) (slot *atomic.Pointer[fpEntry], canonical []byte, fp string, ok bool) {
	if len(raw) > fpBigMaxBytes {
		return nil, nil, "", false
	}
	slot = f.slotOf(f.hash(tool, raw), len(raw))
	e := slot.Load()
	if e == nil || e.tool != tool || !bytes.Equal(e.raw, raw) {
		return slot, nil, "", false
	}
	return slot, e.canonical, e.fp, true
}

// put caches the call's canonical arguments and fingerprint in s, the slot get returned for it.
func (f *fpCache) put(s *atomic.Pointer[fpEntry], tool string, raw, canonical []byte, fp string) {
	if s == nil || len(raw) > fpBigMaxBytes || len(raw)+len(canonical) > fpBigBudget/4 {
		return // (canonical numbers can be a few times longer than the raw ones)
	}
	e := &fpEntry{tool: tool, raw: bytes.Clone(raw), canonical: canonical, fp: fp}
	if len(raw) <= fpCacheMaxBytes {
		s.Store(e)
		return
	}
	f.big.Put(s, e, fpBigBudget)
}
