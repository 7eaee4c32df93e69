package fence

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync/atomic"
)

// fpCache remembers the canonical arguments and fingerprint of recent calls by their exact
// bytes, so that a retry sent byte for byte again (the common case) skips canonicalisation.
// A hit is confirmed by comparing the full tool and argument bytes, never by hash alone.
//
// It is direct-mapped: a call's hash picks one slot, and a newer call with the same slot
// replaces the older one (a miss only costs canonicalisation). Slots are atomic pointers to
// immutable entries, so a lookup takes no lock.
type fpCache struct {
	seed  maphash.Seed
	slots [fpCacheSlots]atomic.Pointer[fpEntry]
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
	fpCacheMaxBytes = 4096 // larger arguments are not cached
)

func newFPCache() *fpCache { return &fpCache{seed: maphash.MakeSeed()} }

func (f *fpCache) slot(tool string, raw []byte) *atomic.Pointer[fpEntry] {
	// The arguments are hashed whole; the tool, a short name, only by its length and its
	// first and last eight bytes (a second maphash call cost a tenth of a replay). Two tools
	// that differ only in between share a slot for the same arguments: a miss, never a
	// wrong hit.
	var first, last uint64
	if len(tool) >= 8 {
		first, last = binary.LittleEndian.Uint64([]byte(tool[:8])), binary.LittleEndian.Uint64([]byte(tool[len(tool)-8:]))
	} else {
		var w [8]byte
		copy(w[:], tool)
		first = binary.LittleEndian.Uint64(w[:])
	}
	t := (first ^ bits.RotateLeft64(last, 29) ^ uint64(len(tool))<<56) * 0x9e3779b97f4a7c15
	h := maphash.Bytes(f.seed, raw) ^ t
	return &f.slots[h>>(64-fpCacheBits)]
}

func (f *fpCache) get(tool string, raw []byte) ([]byte, string, bool) {
	if len(raw) > fpCacheMaxBytes {
		return nil, "", false
	}
	e := f.slot(tool, raw).Load()
	if e == nil || e.tool != tool || !bytes.Equal(e.raw, raw) {
		return nil, "", false
	}
	return e.canonical, e.fp, true
}

func (f *fpCache) put(tool string, raw, canonical []byte, fp string) {
	if len(raw) > fpCacheMaxBytes {
		return
	}
	f.slot(tool, raw).Store(&fpEntry{tool: tool, raw: bytes.Clone(raw), canonical: canonical, fp: fp})
}
