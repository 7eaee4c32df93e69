package fence

import (
	"math/rand/v2"
	"testing"
)

// TestAppendCanonicalOfAnyClock: for random clocks (one to three agents, zero and large
// counts, the empty agent, keys that need escapes or are not valid UTF-8) and an agent that
// is or is not in them, appendCanonicalOf writes byte for byte what appendCanonical writes.
// U+FFFD is left out of the keys: beside an invalid key it would be written alike, and
// appendCanonical's order of two keys written alike follows the map (the engine refuses clock
// keys that are not valid UTF-8, so no recorded clock holds both).
func TestAppendCanonicalOfAnyClock(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 4))
	keys := []string{"", "a", "billing", "B", "\"", "\\", "\x00", "\x1f", "\x7f", "\u2028", "<&>",
		"\xff", "a\xc3", "\xed\xa0\x80", "\U0001F600", "é", "e\u0301"}
	counts := []uint64{0, 1, 2, 1 << 53, 1<<64 - 1}
	for range 50000 {
		var v VectorClock
		switch n := r.IntN(4); n {
		case 0:
			if r.IntN(2) == 0 {
				v = VectorClock{}
			}
		default:
			v = make(VectorClock, n)
			for range n {
				v[keys[r.IntN(len(keys))]] = counts[r.IntN(len(counts))]
			}
		}
		agent := keys[r.IntN(len(keys))]
		if len(v) > 0 && r.IntN(2) == 0 {
			for k := range v {
				agent = k
				break
			}
		}
		want := string(v.appendCanonical([]byte("pre")))
		if got := string(v.appendCanonicalOf([]byte("pre"), agent)); got != want {
			t.Fatalf("%#v with agent %q: %q; want %q", v, agent, got, want)
		}
	}
}
