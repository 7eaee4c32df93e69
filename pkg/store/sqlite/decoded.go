package sqlite

import (
	"bytes"
	"hash/maphash"
	"sync/atomic"

	"github.com/effectfence/effectfence/pkg/fence"
)

// decodedCache remembers the last record decoded for each of a few thousand intents, keyed by
// the exact bytes of its body: a replay reads the same done record again and again, and
// decoding its JSON was most of a replay's cost. A hit needs the body just read from the file
// to equal the remembered one byte for byte, so the cache can never answer with anything but
// what decoding those bytes gives; a record changed by any process simply misses.
//
// Records handed out are shared by every hit. fence.Tx allows it: the engine never changes a
// record it got (it copies one to write a new version), as with the memory store, which hands
// out the records it holds.
type decodedCache struct {
	seed  maphash.Seed
	slots [decodedSlots]atomic.Pointer[decodedEntry]
}

type decodedEntry struct {
	intent string
	body   []byte
	rec    *fence.Record
}

const (
	decodedSlots   = 2048 // a power of two
	decodedMaxBody = 16 << 10
)

func newDecodedCache() *decodedCache { return &decodedCache{seed: maphash.MakeSeed()} }

func (c *decodedCache) slot(intent string) *atomic.Pointer[decodedEntry] {
	return &c.slots[maphash.String(c.seed, intent)&(decodedSlots-1)]
}

func (c *decodedCache) get(intent string, body []byte) *fence.Record {
	e := c.slot(intent).Load()
	if e == nil || e.intent != intent || !bytes.Equal(e.body, body) {
		return nil
	}
	return e.rec
}

func (c *decodedCache) put(intent string, body []byte, rec *fence.Record) {
	if len(body) <= decodedMaxBody {
		c.putOwned(intent, bytes.Clone(body), rec)
	}
}

// putOwned is put for a body that nobody will change: the cache keeps it as it is. rec must
// be exactly what decoding body gives (fence.EncodeRecordDecoded's record is).
func (c *decodedCache) putOwned(intent string, body []byte, rec *fence.Record) {
	if len(body) > decodedMaxBody {
		return
	}
	c.slot(intent).Store(&decodedEntry{intent: intent, body: body, rec: rec})
}
