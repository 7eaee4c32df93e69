// Package hide takes redacted argument values out of text a server wrote (an error message, the
// tail of its stderr) before wrap records that text in the ledger.
package hide

import (
	"cmp"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
)

// Redacted is what a value taken out is replaced by: fence.Redacted's spelling (this package
// sits below mcpstdio, which does not import the engine).
const Redacted = "[redacted]"

// Replace replaces every occurrence of texts in s with Redacted. Occurrences that overlap
// (one value inside or across another) are taken out together, as one Redacted; values that
// merely touch are two. The order of texts does not matter.
//
// s is read once for each distinct length among the texts (not longer than s): by
// strings.Index for a length of a few short texts, otherwise by a rolling hash (Rabin-Karp),
// so the work is that count times len(s), however many texts share a length. Before
// 2026-12-06 each text was replaced in turn, each pass a copy of s: a call whose redacted path
// held 20,000 short values, answered by a JSON-RPC error echoing them (2.2 MB), took 53 s to
// scrub before its outcome was recorded. Should the work still pass maxWork (thousands of
// distinct lengths against megabytes of text), s is not shown at all.
func Replace(s string, texts []string) string {
	spans, ok := occurrences(s, texts)
	if !ok {
		return fmt.Sprintf("(%d bytes, not shown: too many argument values to keep out of them)", len(s))
	}
	return without(s, spans)
}

// without is s with each of spans (sorted, none overlapping another) replaced by Redacted.
func without(s string, spans []span) string {
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0 // s[:last] is written
	for _, sp := range spans {
		b.WriteString(s[last:sp.lo])
		b.WriteString(Redacted)
		last = sp.hi
	}
	b.WriteString(s[last:])
	return b.String()
}

// span is an occurrence of a text: s[lo:hi].
type span struct{ lo, hi int }

// maxWork bounds the bytes Replace reads: len(s) once per distinct length (once per text of
// a length strings.Index looks for).
var maxWork = 1 << 30

// fewTexts is how many texts of one length strings.Index looks for, each in turn.
var fewTexts = 4

// byIndex says whether count texts of length n are looked for by strings.Index, one at a time
// (a pass over s each), rather than by the rolling hash (one pass for them all).
func byIndex(count, n int) bool { return count <= fewTexts && n <= 64 }

// occurrences returns the occurrences of texts in s, those that overlap merged into one span,
// sorted. ok is false when finding them would cost more than maxWork.
//
// Merged as they are found: a value repeated in a run of itself is found at every offset of
// the run, for each length, and one span apiece (16 bytes for each byte of s and length) asked
// for gigabytes (values of 16 lengths in a 64 MB answer: 16 GB).
func occurrences(s string, texts []string) (spans []span, ok bool) {
	byLen := map[int][]string{}
	for _, t := range texts {
		if t != "" && len(t) <= len(s) {
			byLen[len(t)] = append(byLen[len(t)], t)
		}
	}
	work := 0
	for n, ts := range byLen {
		passes := 1
		if byIndex(len(ts), n) {
			passes = len(ts)
		}
		if work += passes * (len(s) - n + 1); work > maxWork {
			return nil, false
		}
	}
	// found holds the occurrences of one length, each text's in order: one that starts inside
	// the last is merged into it.
	var found, spare []span
	mark := func(i, n int) {
		if k := len(found) - 1; k >= 0 && found[k].lo <= i && i < found[k].hi {
			found[k].hi = max(found[k].hi, i+n)
			return
		}
		found = append(found, span{i, i + n})
	}
	for n, ts := range byLen {
		found = found[:0]
		occurrencesOfLength(s, n, ts, mark)
		if byLo := func(a, b span) int { return cmp.Compare(a.lo, b.lo) }; !slices.IsSortedFunc(found, byLo) {
			slices.SortFunc(found, byLo) // texts found by strings.Index, each in turn
		}
		spans, spare = union(spare[:0], spans, found), spans
	}
	return spans, true
}

// union appends to out the spans of a and b (each sorted), those that overlap merged.
func union(out, a, b []span) []span {
	for len(a) > 0 || len(b) > 0 {
		var next span
		if len(b) == 0 || len(a) > 0 && a[0].lo <= b[0].lo {
			next, a = a[0], a[1:]
		} else {
			next, b = b[0], b[1:]
		}
		if k := len(out) - 1; k >= 0 && next.lo < out[k].hi {
			out[k].hi = max(out[k].hi, next.hi)
			continue
		}
		out = append(out, next)
	}
	return out
}

// occurrencesOfLength calls mark(i, n) for each occurrence s[i:i+n] of texts ts, all of
// length n (at most len(s)), each text's in order.
func occurrencesOfLength(s string, n int, ts []string, mark func(i, n int)) {
	if byIndex(len(ts), n) {
		// Few short texts: strings.Index, which reads gigabytes a second, finds each,
		// overlapping occurrences too (an occurrence costs at most its length again).
		for _, t := range ts {
			for i := 0; i+n <= len(s); i++ {
				j := strings.Index(s[i:], t)
				if j < 0 {
					break
				}
				i += j
				mark(i, n)
			}
		}
		return
	}
	// Otherwise each window of n bytes is hashed in turn, and a window whose hash is a
	// text's is taken for that text without comparing them: comparing costs n a window
	// where many windows match (a repeated value in a repeated text), and a hash that
	// only collides (at most n chances in 2^61 for a window) takes out bytes of the
	// server's words that were no value, which costs less than leaving one in.
	hashes := make(map[uint64]struct{}, len(ts))
	// seen has a bit set for each hash's low bits: most windows are no text, and testing
	// a bit costs less than a map lookup.
	bitsLen := 64
	for bitsLen < 16*len(ts) && bitsLen < 1<<26 {
		bitsLen <<= 1
	}
	seen, mask := make([]uint64, bitsLen/64), uint64(bitsLen-1)
	for _, t := range ts {
		h := hashOf(t)
		hashes[h] = struct{}{}
		seen[h&mask/64] |= 1 << (h & 63)
	}
	// pow is base^(n-1): the weight of the byte that leaves the window.
	pow := uint64(1)
	for range n - 1 {
		pow = mulMod(pow, base)
	}
	h := hashOf(s[:n])
	for i := 0; ; i++ {
		if seen[h&mask/64]&(1<<(h&63)) != 0 {
			if _, ok := hashes[h]; ok {
				mark(i, n)
			}
		}
		if i+n == len(s) {
			break
		}
		h = addMod(h, prime-mulMod(uint64(s[i]), pow)) // drop s[i]
		h = addMod(mulMod(h, base), uint64(s[i+n]))    // take s[i+n]
	}
}

// The rolling hash: a polynomial in a base drawn for each process, modulo the Mersenne prime
// 2^61-1, so that no text can be built to collide with another.
const prime = 1<<61 - 1

var base = rand.Uint64N(prime-256) + 256

func hashOf(s string) uint64 {
	h := uint64(0)
	for i := 0; i < len(s); i++ {
		h = addMod(mulMod(h, base), uint64(s[i]))
	}
	return h
}

// mulMod is a*b mod prime, for a and b below prime.
func mulMod(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return addMod(hi<<3|lo>>61, lo&prime) // a*b = (hi<<3|lo>>61)*2^61 + lo&prime, and 2^61 = 1
}

// addMod is a+b mod prime, for a and b at most prime.
func addMod(a, b uint64) uint64 {
	s := a + b
	for s >= prime {
		s -= prime
	}
	return s
}

// Edges is Replace for a piece of a longer text: the last bytes of a stream (a child's stderr,
// kept up to a bound), where a value can stand in part. Where the piece ends, the end of s
// that is the beginning of a text (the writer stopped half way through the value) is replaced;
// and, when cut is set (the piece lost what came before it), so is the beginning of s that is
// part of a text (the cut fell inside the value). A part as short as one byte is replaced
// too: a byte too many taken out of the server's words costs less than a value left in them.
func Edges(s string, texts []string, cut bool) string {
	head, tail := 0, 0 // how many bytes at s's start and end are part of a value
	for _, t := range texts {
		if t == "" {
			continue
		}
		if cut {
			head = max(head, prefixInside(s, t))
		}
		tail = max(tail, suffixStarting(s, t))
	}
	if head+tail >= len(s) {
		if head+tail == 0 {
			return s
		}
		return Redacted
	}
	// Whole values are looked for in all of s, edges included: one can end inside the part at
	// an edge (its last bytes the first of another value, where the writer stopped) or begin
	// inside it, and looked for between the edges it was left there but for those bytes.
	spans, ok := occurrences(s, texts)
	if !ok {
		return Replace(s, texts)
	}
	var edges []span
	if head > 0 {
		edges = append(edges, span{0, head})
	}
	if tail > 0 {
		edges = append(edges, span{len(s) - tail, len(s)})
	}
	return without(s, union(nil, spans, edges))
}

// prefixInside returns the length of the longest beginning of s found anywhere in t. A shorter
// beginning of a found one is found too, so the length is searched by halves.
func prefixInside(s, t string) int {
	lo, hi := 0, min(len(s), len(t)) // s[:lo] is in t; s[:hi+1] is not, or beyond
	for lo < hi {
		m := lo + (hi-lo+1)/2
		if strings.Contains(t, s[:m]) {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo
}

// suffixStarting returns the length of the longest end of s that is a beginning of t, shorter
// than t (t whole is Replace's).
func suffixStarting(s, t string) int {
	for k := min(len(s), len(t)-1); k > 0; k-- {
		if strings.HasSuffix(s, t[:k]) {
			return k
		}
	}
	return 0
}
