package fence

import (
	"bytes"
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
	fpCacheSlots    = 4096 // a power of two
	fpCacheMaxBytes = 4096 // larger arguments are not cached
)

func newFPCache() *fpCache { return &fpCache{seed: maphash.MakeSeed()} }

func (f *fpCache) slot(tool string, raw []byte) *atomic.Pointer[fpEntry] {
	h := maphash.Bytes(f.seed, raw) ^ bits.RotateLeft64(maphash.String(f.seed, tool), 17)
	return &f.slots[h&(fpCacheSlots-1)]
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
