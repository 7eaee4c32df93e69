package fence_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
)

// redactArgsDecoded is the implementation RedactArgs replaced, kept as the reference the new
// one is compared with: decode the arguments, replace the values at each path in turn, encode
// and canonicalise again.
func redactArgsDecoded(args []byte, paths []string) ([]byte, error) {
	if len(paths) == 0 {
		return args, nil
	}
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	changed := false
	for _, p := range paths {
		if redactDecodedAt(v, strings.Split(p, ".")) {
			changed = true
		}
	}
	if !changed {
		return args, nil
	}
	return canon.Marshal(v)
}

func redactDecodedAt(v any, path []string) bool {
	seg, rest := path[0], path[1:]
	found := false
	visit := func(get func() any, set func()) {
		if len(rest) == 0 {
			set()
			found = true
			return
		}
		if redactDecodedAt(get(), rest) {
			found = true
		}
	}
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if seg != "*" && k != seg {
				continue
			}
			visit(func() any { return child }, func() { x[k] = fence.Redacted })
		}
	case []any:
		if seg != "*" {
			return false
		}
		for i := range x {
			visit(func() any { return x[i] }, func() { x[i] = fence.Redacted })
		}
	}
	return found
}

// largeArgs returns canonical arguments of at least size bytes: a list of charges, each with a
// card, line items and some text.
func largeArgs(tb testing.TB, size int) []byte {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"amount":%d,"card":{"cvv":"%03d","exp":"12/30","number":"41111111%08d"},"lines":[{"qty":1,"sku":"a-%d"},{"qty":2,"sku":"b-%d"}],"note":"order number %d, deliver to the back door"}`,
			i*7, i%1000, i, i, i, i)
	}
	b.WriteString(`],"total":1}`)
	c, err := canon.JSON([]byte(b.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// redactPaths returns n paths over largeArgs: the card's number and cvv, then paths that
// name nothing but lead through every item, half of them with a star at every level.
func redactPaths(n int) []string {
	paths := []string{"items.*.card.number", "items.*.card.cvv", "*.*.lines.*.sku", "*.*.*.x"}
	for i := 0; len(paths) < n; i++ {
		if i%2 == 0 {
			paths = append(paths, "items.*.f"+strconv.Itoa(i))
		} else {
			paths = append(paths, "*.*.*.*.f"+strconv.Itoa(i))
		}
	}
	return paths[:n]
}

// BenchmarkRedactArgs: redaction by argument size and number of paths, beside the decoding
// implementation it replaced.
func BenchmarkRedactArgs(b *testing.B) {
	for _, size := range []int{64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20} {
		args := largeArgs(b, size)
		for _, n := range []int{1, 4, 16, 64} {
			paths := redactPaths(n)
			for _, impl := range []struct {
				name   string
				redact func([]byte, []string) ([]byte, error)
			}{{"onepass", fence.RedactArgs}, {"decoded", redactArgsDecoded}} {
				b.Run(fmt.Sprintf("size=%dK/paths=%d/%s", size>>10, n, impl.name), func(b *testing.B) {
					b.ReportAllocs()
					b.SetBytes(int64(len(args)))
					for b.Loop() {
						if _, err := impl.redact(args, paths); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// redactNames are the member names of the random arguments and the segments of the random
// paths: escaped ones (a quote, a backslash, a control character), non-ASCII ones, the empty
// name, one that is a star, one with a dot (no path can name it) and one made of invalid UTF-8
// (no JSON name is it).
var redactNames = []string{"a", "b", "c", "ab", `q"`, `\`, "\x01", "\n", "é", "日本", "\U0001F600", "", "*", "a.b", "\xff", fence.Redacted}

// redactNumbers are numbers of every kind, as sent (canon writes each in its canonical form).
var redactNumbers = []string{"0", "-0", "1", "-1", "1.5", "-0.25", "1e3", "1E-7", "12345678901234567890123", "0.1000000000000000000001", "5e-324", "1.7976931348623157e308", "1e400", "-2.5e-400", "100"}

// randomValue writes a random JSON value nested at most depth levels.
func randomValue(r *rand.Rand, b *strings.Builder, depth int) {
	k := r.IntN(10)
	if depth <= 0 {
		k = 6 + k%4
	}
	switch k {
	case 0, 1, 2: // an object
		b.WriteByte('{')
		seen := map[string]bool{}
		for n := r.IntN(5); n > 0; n-- {
			name := redactNames[r.IntN(len(redactNames)-1)] // all but the invalid one
			if seen[name] {
				continue
			}
			seen[name] = true
			if len(seen) > 1 {
				b.WriteByte(',')
			}
			nb, _ := json.Marshal(name)
			b.Write(nb)
			b.WriteByte(':')
			randomValue(r, b, depth-1)
		}
		b.WriteByte('}')
	case 3, 4, 5: // an array
		b.WriteByte('[')
		for n := r.IntN(5); n > 0; n-- {
			randomValue(r, b, depth-1)
			if n > 1 {
				b.WriteByte(',')
			}
		}
		b.WriteByte(']')
	case 6:
		b.WriteString(redactNumbers[r.IntN(len(redactNumbers))])
	case 7:
		nb, _ := json.Marshal(redactNames[r.IntN(len(redactNames)-1)])
		b.Write(nb)
	default:
		b.WriteString([]string{"true", "false", "null", `"[redacted]"`, `"x\u00e9\t"`}[r.IntN(5)])
	}
}

// randomPaths returns n random paths of up to depth segments.
func randomPaths(r *rand.Rand, n, depth int) []string {
	paths := make([]string, n)
	for i := range paths {
		segs := make([]string, 1+r.IntN(depth))
		for j := range segs {
			if r.IntN(3) == 0 {
				segs[j] = "*"
			} else {
				segs[j] = redactNames[r.IntN(len(redactNames))]
			}
		}
		paths[i] = strings.Join(segs, ".")
	}
	return paths
}

// TestRedactArgsAsDecoded: on random canonical arguments and random paths (escaped names, a
// star at any level, overlapping paths, arrays, empty objects, numbers of every kind, more
// paths than one pass takes), RedactArgs answers byte for byte what decoding, replacing path
// after path and encoding answered, canonical JSON, and args itself when nothing changed.
func TestRedactArgsAsDecoded(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	changed := 0
	for n := 0; n < 20000; n++ {
		var b strings.Builder
		randomValue(r, &b, 1+r.IntN(6))
		args, err := canon.JSON([]byte(b.String()))
		if err != nil {
			t.Fatalf("%s: %v", b.String(), err)
		}
		np := 1 + r.IntN(6)
		if n%50 == 0 {
			np = 60 + r.IntN(80)
		}
		paths := randomPaths(r, np, 5)
		want, err := redactArgsDecoded(args, paths)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fence.RedactArgs(args, paths)
		if err != nil {
			t.Fatalf("%s %q: %v", args, paths, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("args %s paths %q:\n got %s\nwant %s", args, paths, got, want)
		}
		if again, err := canon.JSON(got); err != nil || !bytes.Equal(again, got) {
			t.Fatalf("not canonical: %s (%v)", got, err)
		}
		if bytes.Equal(got, args) {
			if &got[0] != &args[0] {
				t.Fatalf("unchanged %s, yet copied", args)
			}
		} else {
			changed++
		}
	}
	if changed < 2000 {
		t.Fatalf("only %d of the random cases redacted anything", changed)
	}
}

// TestRedactArgsDeep: arguments nested as deep as the engine takes them, with paths as long,
// are redacted as decoding them was, without recursion.
func TestRedactArgsDeep(t *testing.T) {
	const depth = fence.MaxNesting - 1
	object := strings.Repeat(`{"a":`, depth) + `[1,{"b":2}]` + strings.Repeat(`}`, depth)
	array := strings.Repeat(`[0,`, depth) + `{"a":1}` + strings.Repeat(`]`, depth)
	long := func(seg string, n int) string { return strings.Repeat(seg+".", n-1) + seg }
	for _, c := range []struct {
		args  string
		paths []string
		names bool // the paths name something
	}{
		{object, []string{long("a", depth)}, true},
		{object, []string{long("a", depth) + ".*.b"}, true},
		{object, []string{long("*", depth) + ".*.*"}, true},
		{object, []string{long("a", depth+3)}, false},
		{object, []string{long("a", depth/2) + ".*", long("*", depth)}, true},
		{array, []string{long("*", depth) + ".a"}, true},
		{array, []string{long("*", depth/3), long("*", depth)}, true},
		{array, []string{long("*", depth) + ".b"}, false},
	} {
		args, err := canon.JSON([]byte(c.args))
		if err != nil {
			t.Fatal(err)
		}
		paths := append(c.paths, redactPaths(64-len(c.paths))...)
		want, err := redactArgsDecoded(args, paths)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fence.RedactArgs(args, paths)
		if bytes.Equal(want, args) == c.names {
			t.Fatalf("paths of %d segments: the case is wrong", strings.Count(c.paths[0], ".")+1)
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("paths of %d segments: got %.80s… (%v), want %.80s…", strings.Count(c.paths[0], ".")+1, got, err, want)
		}
	}
}

func TestRedactArgsRefusesInvalidJSON(t *testing.T) {
	for _, args := range []string{``, `{"a":`, `{"a":1`, `[1,`, `{"a" 1}`, `"abc`, `{"a":1}x`} {
		if _, err := fence.RedactArgs([]byte(args), []string{"a"}); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%q: got %v, want invalid_request", args, err)
		}
	}
}

// TestRedactArgsAllocations: redacting 64 paths over 1 MiB of arguments allocates a few
// objects and little more than the copy, counted rather than timed. Decoding them and walking
// the tree once per path allocated about 440,000 objects and 24 MB.
func TestRedactArgsAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	args := largeArgs(t, 1<<20)
	paths := redactPaths(fence.MaxRedactPaths)
	const runs = 5
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	allocs := testing.AllocsPerRun(runs, func() {
		if _, err := fence.RedactArgs(args, paths); err != nil {
			t.Fatal(err)
		}
	})
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / (runs + 1) // AllocsPerRun warms up once
	if limit := uint64(len(args) + len(args)/8); allocs > 4 || perRun > limit {
		t.Fatalf("%d bytes of arguments, %d paths: %v allocations and %d bytes per call; want at most 4 and %d",
			len(args), len(paths), allocs, perRun, limit)
	}
	t.Logf("%d bytes of arguments, %d paths: %v allocations and %d bytes per call", len(args), len(paths), allocs, perRun)
}

// TestRedactArgsCases: what redaction makes of overlapping paths, stars, escaped names and
// values already redacted, spelled out.
func TestRedactArgsCases(t *testing.T) {
	for _, c := range []struct {
		args  string
		paths []string
		want  string
	}{
		{`{"a":{"b":1,"c":2},"d":3}`, []string{"a.b", "a"}, `{"a":"[redacted]","d":3}`},
		{`{"a":{"b":1,"c":2},"d":3}`, []string{"a", "a.b"}, `{"a":"[redacted]","d":3}`},
		{`{"a":{"b":1,"c":2},"d":{"b":[]}}`, []string{"*.b"}, `{"a":{"b":"[redacted]","c":2},"d":{"b":"[redacted]"}}`},
		{`{"a":{"b":1,"c":2},"d":{"b":[]}}`, []string{"*.b", "d"}, `{"a":{"b":"[redacted]","c":2},"d":"[redacted]"}`},
		{`[{"a":1},{"b":2},3,[{"a":4}]]`, []string{"*.a"}, `[{"a":"[redacted]"},{"b":2},3,[{"a":4}]]`},
		{`[{"a":1},{"b":2},3,[{"a":4}]]`, []string{"*.*.a"}, `[{"a":1},{"b":2},3,[{"a":"[redacted]"}]]`},
		{`[1,[2]]`, []string{"*"}, `["[redacted]","[redacted]"]`},
		{`[1,[2]]`, []string{"0"}, `[1,[2]]`}, // an array's elements have no names
		{`{"":1,"a\"b":2,"é":3,"\u0001":4}`, []string{"", `a"b`, "é", "\x01"}, `{"":"[redacted]","\u0001":"[redacted]","a\"b":"[redacted]","é":"[redacted]"}`},
		{`{"\\":{},"a":{}}`, []string{`\`, "a.x"}, `{"\\":"[redacted]","a":{}}`},
		{`{"a":"[redacted]"}`, []string{"a"}, `{"a":"[redacted]"}`},
		{`{"a.b":1,"a":{"b":2}}`, []string{"a.b"}, `{"a":{"b":"[redacted]"},"a.b":1}`},
		{`"a"`, []string{"a"}, `"a"`},
		{`{}`, []string{"*"}, `{}`},
	} {
		args, err := canon.JSON([]byte(c.args))
		if err != nil {
			t.Fatal(err)
		}
		got, err := fence.RedactArgs(args, c.paths)
		if err != nil || string(got) != c.want {
			t.Errorf("%s %q: got %s (%v), want %s", args, c.paths, got, err, c.want)
		}
	}
}

// FuzzRedactArgs compares RedactArgs with the decoding implementation on any canonical
// arguments and paths (joined by commas).
func FuzzRedactArgs(f *testing.F) {
	f.Add(`{"a":{"b":1,"c":[{"d":2}]},"e":"x"}`, "a.b,*.c.*.d,e")
	f.Add(`[{"\u0001":1},{"q\"":[]}]`, "*.\x01,*.q\",*")
	f.Fuzz(func(t *testing.T, raw, joined string) {
		args, err := canon.JSON([]byte(raw))
		if err != nil {
			return
		}
		paths := strings.Split(joined, ",")
		want, err := redactArgsDecoded(args, paths)
		if err != nil {
			return // nested beyond encoding/json's limit
		}
		got, err := fence.RedactArgs(args, paths)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s %q: got %s (%v), want %s", args, paths, got, err, want)
		}
	})
}
