package canon

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/gowebpki/jcs"
)

// randomJSON writes a random JSON value: objects with members out of order (names with
// escapes, non-ASCII and runes above U+FFFF, whose UTF-16 order differs from byte order),
// arrays, strings long enough that objects cross reorderInPlace, integers, literals and
// white space. dup, when set, lets an object repeat a name (after unescaping).
func randomJSON(r *rand.Rand, b *strings.Builder, depth int, dup bool) {
	ws := func() {
		if r.IntN(4) == 0 {
			b.WriteString([]string{" ", "\n", "\t ", "\r\n "}[r.IntN(4)])
		}
	}
	ws()
	kind := r.IntN(10)
	if depth > 6 {
		kind = 9
	}
	switch {
	case kind < 4:
		names := []string{`a`, `b`, `c`, `aa`, `é`, `\u00e9x`, `😀`, `\ud83d\ude01`, `\uffff`, `z\"q`, `\n`, `ab`, `b\u0000`}
		r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		n := r.IntN(5)
		if dup && n > 1 && r.IntN(3) == 0 {
			names[n-1] = names[0]
		}
		b.WriteByte('{')
		for k := 0; k < n; k++ {
			if k > 0 {
				b.WriteByte(',')
			}
			ws()
			b.WriteString(`"` + names[k] + `"`)
			ws()
			b.WriteByte(':')
			randomJSON(r, b, depth+1, dup)
		}
		ws()
		b.WriteByte('}')
	case kind < 6:
		b.WriteByte('[')
		for k, n := 0, r.IntN(4); k < n; k++ {
			if k > 0 {
				b.WriteByte(',')
			}
			randomJSON(r, b, depth+1, dup)
		}
		ws()
		b.WriteByte(']')
	case kind < 8:
		size := r.IntN(40)
		if r.IntN(5) == 0 {
			size = 200 + r.IntN(1200) // pushes the objects around it past reorderInPlace
		}
		b.WriteString(`"` + strings.Repeat(string(rune('a'+r.IntN(26))), size) + `\u0001\/"`)
	default:
		b.WriteString([]string{"0", "-7", "12345678901", "true", "false", "null"}[r.IntN(6)])
	}
	ws()
}

// TestDeferredReorderMatchesInPlace: however objects are reordered (in place, all deferred
// to the end, or a mix across reorderInPlace), the canonical form is the same, and it is the
// RFC 8785 library's; a duplicate name is refused the same way.
func TestDeferredReorderMatchesInPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 2026))
	deferredSeen, dupSeen := 0, 0
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		randomJSON(r, &b, 0, i%4 == 0)
		in := []byte(b.String())
		mixed, err := canonicalWith(in, reorderInPlace)
		for _, inPlace := range []int{0, 40, math.MaxInt} {
			got, gerr := canonicalWith(in, inPlace)
			if (err == nil) != (gerr == nil) || !bytes.Equal(got, mixed) {
				t.Fatalf("in place up to %d: %q (%v), with %d: %q (%v), for %q", inPlace, got, gerr, reorderInPlace, mixed, err, in)
			}
			if err != nil && !errors.Is(gerr, ErrDuplicateKey) {
				t.Fatalf("in place up to %d: error %v, with %d: %v", inPlace, gerr, reorderInPlace, err)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrDuplicateKey) {
				t.Fatalf("%q: %v", in, err)
			}
			dupSeen++
			continue
		}
		p := parser{in: in, out: make([]byte, 0, len(in)), inPlace: reorderInPlace}
		if p.value(0) == nil && len(p.deferred) > 0 {
			deferredSeen++
		}
		want, lerr := jcs.Transform(in)
		if lerr != nil || !bytes.Equal(mixed, want) {
			t.Fatalf("ours %q, library %q (%v), for %q", mixed, want, lerr, in)
		}
	}
	if deferredSeen < 100 || dupSeen < 50 {
		t.Fatalf("the inputs exercised too little: %d with deferred objects, %d with duplicate names", deferredSeen, dupSeen)
	}
}

// deepOutOfOrder is depth objects, each holding the next under "b" and then "a":1, around a
// string of leaf bytes; and its canonical form.
func deepOutOfOrder(depth, leaf int) (in, want []byte) {
	s := `"` + strings.Repeat("x", leaf) + `"`
	in = []byte(strings.Repeat(`{"b":`, depth) + s + strings.Repeat(`,"a":1}`, depth))
	want = []byte(strings.Repeat(`{"a":1,"b":`, depth) + s + strings.Repeat(`}`, depth))
	return in, want
}

// TestDeepOutOfOrderNestingCopiesOnce: objects out of order nested thousands deep around a
// large value are written in order without copying the value once per level (which took 36 s
// and allocated 36 GB for a 4 MB request). What the parse copies and allocates is counted,
// not timed.
func TestDeepOutOfOrderNestingCopiesOnce(t *testing.T) {
	for _, c := range []struct{ depth, leaf int }{{2000, 1 << 20}, {MaxDepth, 64 << 10}, {3, 1 << 20}, {MaxDepth, 0}} {
		t.Run(fmt.Sprintf("depth=%d/leaf=%d", c.depth, c.leaf), func(t *testing.T) {
			in, want := deepOutOfOrder(c.depth, c.leaf)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			p := parser{in: in, out: make([]byte, 0, len(in)), inPlace: reorderInPlace}
			got, err := p.run()
			runtime.ReadMemStats(&after)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("got %.80q… (%v)", got, err)
			}
			// Every level is out of order, and all but the innermost few are larger than
			// reorderInPlace: the output is copied once more, plus the small levels'.
			if p.moved > len(got)+reorderInPlace*reorderInPlace {
				t.Fatalf("%d bytes of output copied %d bytes to reorder them", len(got), p.moved)
			}
			// The output twice (written in the order read, then in order), the records of the
			// deferred objects (a few hundred bytes a level), and the strings' scratch.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(4*len(in))+uint64(c.depth)*512+1<<20 {
				t.Fatalf("parsing %d bytes nested %d deep allocated %d bytes", len(in), c.depth, alloc)
			}
		})
	}
	// One level deeper than MaxDepth is still refused.
	in, _ := deepOutOfOrder(MaxDepth+1, 0)
	if _, err := JSON(in); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("nesting beyond MaxDepth: %v", err)
	}
}

// BenchmarkJSONDeepOutOfOrder: a 1 MB string under 2,000 levels of objects out of order.
func BenchmarkJSONDeepOutOfOrder(b *testing.B) {
	in, _ := deepOutOfOrder(2000, 1<<20)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := JSON(in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestManyMembersAllocateLittle: the members of a large object are kept in one slice grown by
// doubling, shared by every object of the text, not a slice per object grown by append (by a
// quarter once large, five times the members' size in all, in fresh pages: 2,000,000 members
// cost 560 MB and over a second of copying and page faults). Bytes allocated are counted.
func TestManyMembersAllocateLittle(t *testing.T) {
	for _, order := range []string{"in order", "reversed"} {
		var b strings.Builder
		b.WriteString(`{`)
		const n = 1 << 18
		for i := range n {
			k := i
			if order == "reversed" {
				k = n - i
			}
			fmt.Fprintf(&b, `"k%07d":{"a":1},`, k)
		}
		b.WriteString(`"z":1}`)
		in := []byte(b.String())
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := JSON(in)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		// The output (twice for an object put in order), a string and a span per name, and
		// the members' slice: 32 bytes a member, four times over at worst (doubled once just
		// past a power of two, as here, plus the halves before). Before: 104.7 MB in order,
		// 113.9 MB reversed.
		limit := 2*uint64(len(out)) + n*(16+16) + 4*n*32 + 1<<20
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > limit {
			t.Errorf("%s: %d bytes allocated for an object of %d members (%d bytes); want at most %d", order, alloc, n, len(in), limit)
		}
	}
}

// TestCompareUTF16: member names compare as their UTF-16 code units do (RFC 8785), runes
// above U+FFFF (surrogate pairs) below U+E000-U+FFFF, without encoding them.
func TestCompareUTF16(t *testing.T) {
	alphabet := []rune{'a', 'z', 'é', 0x7ff, 0x800, 0xd7ff, 0xe000, 0xfffd, 0xffff, 0x10000, 0x1f600, 0x1f601, 0x10ffff}
	r := rand.New(rand.NewPCG(8785, 16))
	word := func() string {
		rs := make([]rune, r.IntN(4))
		for i := range rs {
			rs[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(rs)
	}
	for range 50000 {
		a, b := word(), word()
		want := slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
		if got := compareUTF16(a, b); got != want {
			t.Fatalf("compareUTF16(%q, %q) = %d, want %d", a, b, got, want)
		}
	}
}
