package hide

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// TestEdges: a value at the edges of a piece of a stream is taken out also in part: its end
// where the piece was cut before it, its beginning where the writer stopped, the whole piece
// when it lies inside a value; elsewhere only whole values are.
func TestEdges(t *testing.T) {
	texts := []string{"4111222233334444", "true"}
	for _, c := range []struct {
		s    string
		cut  bool
		want string
	}{
		{"33334444 declined\n", true, "[redacted] declined\n"},
		{"2222333 declined\n", true, "[redacted] declined\n"}, // the cut and the value's end both inside
		{"charging 41112222", false, "charging [redacted]"},   // the writer stopped half way
		{"22223333", true, "[redacted]"},
		{"card 4111222233334444 ok\n", false, "card [redacted] ok\n"},
		{"33334444 declined\n", false, "33334444 declined\n"}, // not cut: a start is a start
		{"nothing here\n", true, "nothing here\n"},
		{"", true, ""},
	} {
		if got := Edges(c.s, texts, c.cut); got != c.want {
			t.Errorf("Edges(%q, cut=%v) = %q; want %q", c.s, c.cut, got, c.want)
		}
	}
}

// TestReplaceTakesOutEveryByteOfEveryValue: Replace against a model built another way (every
// occurrence of every text found by strings.Index, the intervals sorted and merged where they
// overlap), on random texts over a small alphabet, so that values overlap, nest, touch and
// repeat: nothing of any occurrence remains, and nothing else is taken.
func TestReplaceTakesOutEveryByteOfEveryValue(t *testing.T) {
	for _, few := range []int{4, 0} { // strings.Index as a rule; the rolling hash always
		t.Run(fmt.Sprintf("fewTexts=%d", few), func(t *testing.T) {
			defer func(f int) { fewTexts = f }(fewTexts)
			fewTexts = few
			replaceAgainstModel(t)
		})
	}
}

func replaceAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "ab[x"[r.IntN(4)]
		}
		return string(b)
	}
	for round := range 3000 {
		s := word(r.IntN(40))
		texts := make([]string, r.IntN(6))
		for i := range texts {
			if len(s) > 0 && r.IntN(2) == 0 { // a piece of s, so that it is found
				lo := r.IntN(len(s))
				texts[i] = s[lo : lo+1+r.IntN(min(6, len(s)-lo))]
			} else {
				texts[i] = word(r.IntN(4))
			}
		}
		if got, want := Replace(s, texts), model(s, texts); got != want {
			t.Fatalf("round %d: Replace(%q, %q) = %q; want %q", round, s, texts, got, want)
		}
	}
}

func model(s string, texts []string) string {
	type span struct{ lo, hi int }
	var spans []span
	for _, t := range texts {
		if t == "" {
			continue
		}
		for i := 0; i+len(t) <= len(s); i++ {
			if j := strings.Index(s[i:], t); j >= 0 {
				spans = append(spans, span{i + j, i + j + len(t)})
				i += j
			} else {
				break
			}
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	var b strings.Builder
	at := 0
	for k := 0; k < len(spans); {
		lo, hi := spans[k].lo, spans[k].hi
		for k++; k < len(spans) && spans[k].lo < hi; k++ {
			hi = max(hi, spans[k].hi)
		}
		b.WriteString(s[at:lo])
		b.WriteString(Redacted)
		at = hi
	}
	return b.String() + s[at:]
}

// TestReplaceWithheldPastItsWork: texts of more distinct lengths than maxWork lets Replace look
// for are not looked for in part: s is not shown at all.
func TestReplaceWithheldPastItsWork(t *testing.T) {
	defer func(w int) { maxWork = w }(maxWork)
	maxWork = 200 // two texts of one length read s twice (2 × 97); three of two lengths, three times
	s := strings.Repeat("card 4111 ", 10)
	if got := Replace(s, []string{"4111", "card"}); strings.Contains(got, "4111") || !strings.Contains(got, Redacted) {
		t.Fatalf("within the work: %q", got)
	}
	got := Replace(s, []string{"4111", "card 4", "d 41"})
	if strings.Contains(got, "4111") || !strings.Contains(got, "100 bytes, not shown") {
		t.Fatalf("past the work: %q", got)
	}
}

// BenchmarkReplaceOneValue: a card number (the six spellings wrap looks for, four distinct)
// in an 8 MB error that holds it 1,000 times.
func BenchmarkReplaceOneValue(b *testing.B) {
	texts := []string{"4111111111111111", `"4111111111111111"`, "4111-1111", "cvv"}
	s := strings.Repeat(strings.Repeat("x", 8000)+"4111111111111111", 1000)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if strings.Contains(Replace(s, texts), "4111111111111111") {
			b.Fatal("a value is left")
		}
	}
}

// BenchmarkReplaceEchoedValues: a JSON-RPC error echoing a call's 20,000 redacted values ten
// times (2.2 MB), the texts wrap looks for in it. Before 2026-12-06 (a ReplaceAll per text) one
// op took 53 s.
func BenchmarkReplaceEchoedValues(b *testing.B) {
	var texts []string
	for i := range 20000 {
		texts = append(texts, fmt.Sprintf("v%07d", i))
	}
	s := strings.Repeat(`invalid: ["`+strings.Join(texts, `","`)+`"]`, 10)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if strings.Contains(Replace(s, texts), "v0000001") {
			b.Fatal("a value is left")
		}
	}
}

// TestReplaceKeepsItsOccurrencesInBoundedMemory: a value that repeats in a run of itself (a
// padding, a repeated byte) is found at every offset of the run, for each length of the texts;
// those occurrences overlap and are kept merged as they are found, not one apiece: values of
// 64 lengths (by strings.Index and by the rolling hash) in a 256 KB run held 16 million spans
// (1.6 GB allocated, 17 s under -race), and the 64 MB an answer may be, with values of 16
// lengths, within the work bound, asked for tens of GB.
func TestReplaceKeepsItsOccurrencesInBoundedMemory(t *testing.T) {
	s := strings.Repeat("a", 256<<10)
	var texts []string
	for n := 65; n >= 2; n-- {
		texts = append(texts, strings.Repeat("a", n))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got := Replace(s, texts)
	runtime.ReadMemStats(&after)
	if got != Redacted {
		t.Fatalf("Replace = %.40q...; want %q", got, Redacted)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16*uint64(len(s)) {
		t.Fatalf("Replace allocated %d bytes for a text of %d", alloc, len(s))
	}
}

// TestEdgesTakesOutAValueThatRunsIntoAnEdge: a whole value whose end is also the beginning of
// another (the card number of a redacted card object written last, its final digit the first
// of the expiry year) is taken out whole, not only from where that beginning starts; so is one
// that begins inside the part of a value the cut left.
func TestEdgesTakesOutAValueThatRunsIntoAnEdge(t *testing.T) {
	texts := []string{"5555555555554442", "2030", "314", "12"}
	if got := Edges("charging card 5555555555554442", texts, false); got != "charging card [redacted]" {
		t.Errorf("the writer stopped after a value: %q", got)
	}
	texts = []string{"1234SECRETVALUE", "AAAA1234"}
	if got := Edges("A1234SECRETVALUE failed\n", texts, true); got != "[redacted] failed\n" {
		t.Errorf("the cut fell inside a value another begins in: %q", got)
	}
}
