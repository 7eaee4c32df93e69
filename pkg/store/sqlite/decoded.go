package sqlite

import (
	"bytes"
	"hash/maphash"
	"sync/atomic"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/budget"
)

// decodedCache remembers the last record decoded for each of a few thousand intents, keyed by
// the exact bytes of its body: a replay reads the same done record again and again, and
// decoding its JSON was most of a replay's cost. A hit needs the body just read from the file
// to equal the remembered one byte for byte, so the cache can never answer with anything but
// what decoding those bytes gives; a record changed by any process simply misses.
//
// Bodies up to decodedMaxBody go to slots, one per intent hash. Larger ones (a tool call with
// tens of kilobytes of arguments, whose decoding costs more than the rest of its admission and
// commit together) go to big, a smaller table that holds at most decodedBigBudget bytes: an
// entry counts twice its body (the body, and the decoded record: its raw values are pieces of
// the body itself (fence.DecodeRecord), but its strings and exact arguments are copies, and a
// record's exact arguments are up to its args again), and a put that would go
// over the budget first evicts other big entries (budget.Table). Lookups take no lock. For a record in big, Get
// asks SQLite whether the file still holds the cached bytes (qGetUnchanged) rather than
// reading them out.
//
// Records handed out are shared by every hit. fence.Tx allows it: the engine never changes a
// record it got (it copies one to write a new version), as with the memory store, which hands
// out the records it holds.
type decodedCache struct {
	seed  maphash.Seed
	slots [decodedSlots]atomic.Pointer[decodedEntry]
	big   *budget.Table[decodedEntry]
}

type decodedEntry struct {
	intent string
	body   []byte
	rec    *fence.Record
	// size is the length of the record's whole encoding: body's, or for a split body
	// (split.go), that of the body joined with its pieces, which rec holds.
	size int
}

// cost is what an entry of big counts against decodedBigBudget.
func (e *decodedEntry) cost() int {
	if e == nil {
		return 0
	}
	return 2 * max(len(e.body), e.size)
}

const (
	decodedSlots   = 2048 // a power of two
	decodedMaxBody = 16 << 10

	// big holds the records of the calls in flight at 64 KB (16 callers' claims and done
	// records cost about 3 MB) and the hot duplicates of large calls, in at most 8 MB.
	decodedBigBudget = 8 << 20
	decodedBigMax    = 1 << 20 // larger bodies are not cached (one would take a quarter of big)
)

func newDecodedCache() *decodedCache {
	return &decodedCache{seed: maphash.MakeSeed(), big: budget.New((*decodedEntry).cost)}
}

func (c *decodedCache) hash(intent string) uint64 { return maphash.String(c.seed, intent) }

func (c *decodedCache) slot(h uint64, size int) *atomic.Pointer[decodedEntry] {
	if size > decodedMaxBody {
		return c.big.Slot(h)
	}
	return &c.slots[h&(decodedSlots-1)]
}

// bigEntry is the entry of big for intent (h is its hash), or nil.
func (c *decodedCache) bigEntry(h uint64, intent string) *decodedEntry {
	e := c.big.Slot(h).Load()
	if e == nil || e.intent != intent {
		return nil
	}
	return e
}

func (c *decodedCache) get(h uint64, intent string, body []byte) *fence.Record {
	if len(body) > decodedBigMax {
		return nil
	}
	size := len(body)
	if isSplit(body) {
		size = decodedMaxBody + 1 // split records are cached in big, by their whole size
	}
	e := c.slot(h, size).Load()
	if e == nil || e.intent != intent || !bytes.Equal(e.body, body) {
		return nil
	}
	return e.rec
}

func (c *decodedCache) put(h uint64, intent string, body []byte, rec *fence.Record) {
	if len(body) <= decodedBigMax {
		c.putOwned(h, intent, bytes.Clone(body), rec)
	}
}

// putOwned is put for a body that nobody will change: the cache keeps it as it is. rec must
// be exactly what decoding body gives (fence.EncodeRecordDecoded's record is).
func (c *decodedCache) putOwned(h uint64, intent string, body []byte, rec *fence.Record) {
	c.putSized(h, intent, body, rec, len(body))
}

// putSized is putOwned for a body whose record's whole encoding is size bytes: a split body
// (split.go) is smaller than the record it stands for, which is kept in big and counted at
// its whole size.
func (c *decodedCache) putSized(h uint64, intent string, body []byte, rec *fence.Record, size int) {
	if isSplit(body) {
		size = max(size, decodedMaxBody+1)
	}
	switch {
	case size > decodedBigMax:
	case size > decodedMaxBody:
		c.big.Put(c.big.Slot(h), &decodedEntry{intent: intent, body: body, rec: rec, size: size}, decodedBigBudget)
	default:
		c.slot(h, size).Store(&decodedEntry{intent: intent, body: body, rec: rec, size: size})
	}
}

// dropBig removes e from big if it is still there.
func (c *decodedCache) dropBig(h uint64, e *decodedEntry) { c.big.Drop(c.big.Slot(h), e) }
