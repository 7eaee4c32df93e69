package fence

import (
	"bytes"
	"hash/maphash"
	"sync"
)

// fpCache remembers the canonical arguments and fingerprint of recent calls by their exact
// bytes, so that a retry sent byte for byte again (the common case) skips canonicalisation.
// A hit is confirmed by comparing the full tool and argument bytes, never by hash alone.
type fpCache struct {
	mu   sync.RWMutex
	seed maphash.Seed
	m    map[uint64]*fpEntry
}

type fpEntry struct {
	tool      string
	raw       []byte
	canonical []byte
	fp        string
}

const (
	fpCacheEntries  = 4096
	fpCacheMaxBytes = 4096 // larger arguments are not cached
)

func (f *fpCache) key(tool string, raw []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(f.seed)
	h.WriteString(tool)
	h.WriteByte(0)
	h.Write(raw)
	return h.Sum64()
}

func (f *fpCache) get(tool string, raw []byte) ([]byte, string, bool) {
	if len(raw) > fpCacheMaxBytes {
		return nil, "", false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.m == nil {
		return nil, "", false
	}
	e := f.m[f.key(tool, raw)]
	if e == nil || e.tool != tool || !bytes.Equal(e.raw, raw) {
		return nil, "", false
	}
	return e.canonical, e.fp, true
}

func (f *fpCache) put(tool string, raw, canonical []byte, fp string) {
	if len(raw) > fpCacheMaxBytes {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil || len(f.m) >= fpCacheEntries {
		if f.m == nil {
			f.seed = maphash.MakeSeed()
		}
		f.m = make(map[uint64]*fpEntry, 64) // start over rather than track recency
	}
	f.m[f.key(tool, raw)] = &fpEntry{tool: tool, raw: bytes.Clone(raw), canonical: canonical, fp: fp}
}
