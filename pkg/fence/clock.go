package fence

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash/maphash"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/effectfence/effectfence/pkg/canon"
)

// VectorClock holds one counter per agent. The zero value (nil) is the empty clock. Entries
// that are zero carry no information: {} and {"x":0} are equal and have the same Digest.
// Methods never modify their receiver.
// A clock taken from a record or a cert may be shared with other records and certs (the
// engine reuses the clock of an agent's first tick): read it, never modify it in place.
type VectorClock map[string]uint64

// Tick returns a copy of v with agent's counter incremented. A counter at math.MaxUint64
// wraps to zero; Engine.Prepare refuses a request whose agent's counter is there.
func (v VectorClock) Tick(agent string) VectorClock {
	out := v.clone(1)
	out[agent]++
	return out
}

// Merge returns the element-wise maximum of v and o.
func (v VectorClock) Merge(o VectorClock) VectorClock {
	out := v.clone(len(o))
	for k, n := range o {
		if n > out[k] {
			out[k] = n
		}
	}
	return out
}

// LE reports whether v happened before or equals o: every counter of v is at most o's.
func (v VectorClock) LE(o VectorClock) bool {
	for k, n := range v {
		if n > o[k] {
			return false
		}
	}
	return true
}

// Equal reports whether v and o hold the same non-zero counters.
func (v VectorClock) Equal(o VectorClock) bool { return v.LE(o) && o.LE(v) }

// Concurrent reports whether neither clock happened before the other: the two decisions were
// made without knowledge of each other, which the fence cannot order and a human should.
func (v VectorClock) Concurrent(o VectorClock) bool { return !v.LE(o) && !o.LE(v) }

// Normal returns a copy without zero entries (nil for the empty clock).
func (v VectorClock) Normal() VectorClock {
	var out VectorClock
	for k, n := range v {
		if n != 0 {
			if out == nil {
				out = make(VectorClock, len(v))
			}
			out[k] = n
		}
	}
	return out
}

// Canonical returns the RFC 8785 canonical JSON of the clock without zero entries.
func (v VectorClock) Canonical() []byte {
	return v.appendCanonical(make([]byte, 0, 16*len(v)+2))
}

// appendCanonical appends Canonical to b.
func (v VectorClock) appendCanonical(b []byte) []byte {
	var small [8]string // most clocks name a few agents: their keys stay on the stack
	keys := small[:0]
	for k, n := range v {
		if n != 0 {
			keys = append(keys, k)
		}
	}
	// RFC 8785 orders members by UTF-16 code units; sortUTF16 does exactly that.
	sortUTF16(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = canon.AppendString(b, k)
		b = append(b, ':')
		b = strconv.AppendUint(b, v[k], 10)
	}
	return append(b, '}')
}

// appendCanonicalOf is appendCanonical for the clock of a record or cert decided by agent,
// which most often holds agent alone (a claim's own first tick): such a clock is written from
// one lookup, without ranging over the map and sorting its keys (setting up the iterator was
// most of the cost of writing a one-agent clock, about 3 % of a fresh admission and commit).
func (v VectorClock) appendCanonicalOf(b []byte, agent string) []byte {
	if len(v) != 1 {
		return v.appendCanonical(b)
	}
	n, ok := v[agent]
	switch {
	case !ok:
		return v.appendCanonical(b)
	case n == 0:
		return append(b, '{', '}')
	}
	b = append(b, '{')
	b = canon.AppendString(b, agent)
	b = append(b, ':')
	b = strconv.AppendUint(b, n, 10)
	return append(b, '}')
}

// Digest is the hex SHA-256 of Canonical: stable across processes and languages.
func (v VectorClock) Digest() string {
	s := sha256.Sum256(v.Canonical())
	return hex.EncodeToString(s[:])
}

// MarshalJSON writes the canonical form, so zero entries never reach the wire.
func (v VectorClock) MarshalJSON() ([]byte, error) { return v.Canonical(), nil }

// UnmarshalJSON reads an object of non-negative integer counters.
func (v *VectorClock) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return InvalidError{Field: "vector_clock", Why: "must be an object of non-negative integer counters: " + err.Error()}
	}
	*v = VectorClock(m).Normal()
	return nil
}

func (v VectorClock) clone(extra int) VectorClock {
	out := make(VectorClock, len(v)+extra)
	for k, n := range v {
		if n != 0 {
			out[k] = n
		}
	}
	return out
}

// sortUTF16 sorts keys in place. It uses the generic sorts, which (unlike sort.Slice) do not
// make keys escape: appendCanonical's small array of keys stays on the stack.
func sortUTF16(keys []string) {
	if len(keys) < 2 {
		return
	}
	// UTF-8 byte order is code point order, which equals UTF-16 order unless a string holds a
	// character above U+FFFF (4-byte UTF-8, lead byte 0xF0 or more).
	for _, k := range keys {
		for i := 0; i < len(k); i++ {
			if k[i] >= 0xF0 {
				slices.SortFunc(keys, compareUTF16)
				return
			}
		}
	}
	slices.Sort(keys)
}

// compareUTF16 compares strings by their UTF-16 code units, as RFC 8785 §3.2.3 requires. For
// strings without characters above U+FFFF this is the same as comparing code points.
func compareUTF16(a, b string) int {
	return slices.Compare(utf16Units(a), utf16Units(b))
}

func utf16Units(s string) []uint16 {
	out := make([]uint16, 0, len(s))
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			out = append(out, uint16(0xD800+(r>>10)), uint16(0xDC00+(r&0x3FF)))
			continue
		}
		out = append(out, uint16(r))
	}
	return out
}

// firstTicks holds {agent: 1}, the clock of a claim whose request brought no clock (or only
// zero counters), for recent agents: one clock per slot, picked by the agent's hash, shared
// by every record and cert that carries it. Sharing is safe because nothing modifies a
// VectorClock in place (its methods return copies); it spares most claims a map of their own,
// two of the few objects a fresh admission allocates, and the collector the work of keeping it.
// A caller may still write into a cert's clock against the rule: a cached clock is reused only
// while it still reads {agent: 1}, so the mistake never reaches the certs of later claims.
type firstTicks struct {
	seed  maphash.Seed
	slots [firstTickSlots]atomic.Pointer[firstTick]
}

type firstTick struct {
	agent string
	clock VectorClock
}

const firstTickSlots = 64 // a power of two

func newFirstTicks() *firstTicks { return &firstTicks{seed: maphash.MakeSeed()} }

// tick returns v.Tick(agent), from the cache when v holds no counter.
func (f *firstTicks) tick(v VectorClock, agent string) VectorClock {
	for _, n := range v {
		if n != 0 {
			return v.Tick(agent)
		}
	}
	slot := &f.slots[maphash.String(f.seed, agent)&(firstTickSlots-1)]
	if e := slot.Load(); e != nil && e.agent == agent && len(e.clock) == 1 && e.clock[agent] == 1 {
		return e.clock
	}
	clock := VectorClock(nil).Tick(agent)
	slot.Store(&firstTick{agent: agent, clock: clock})
	return clock
}
