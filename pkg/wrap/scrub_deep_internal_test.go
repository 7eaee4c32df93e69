package wrap

import (
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestRedactedTextsOfADeepValueCostItsSize: the texts of a redacted value are found in one
// reading of it, whatever its nesting. They are found for every call of a tool with redacted
// paths before it is sent to a stdio server (hide), and a reading that decoded each level's
// value again from its own copy cost the value's size once per level it is nested in, and
// held all those copies at once: 9,900 levels over a 60 MB string (a message wrap accepts)
// asked for hundreds of GB, and wrap ran out of memory before the call was sent.
func TestRedactedTextsOfADeepValueCostItsSize(t *testing.T) {
	p := &Proxy{opt: Options{Redact: map[string][]string{"pay": {"card"}}}}
	const depth = 400
	secret := strings.Repeat("s", 256<<10)
	for _, c := range []struct{ name, open, close string }{
		{"objects", `{"a":`, `}`},
		{"arrays", `[`, `]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			params := []byte(`{"name":"pay","arguments":{"card":` + strings.Repeat(c.open, depth) + `"` + secret + `"` + strings.Repeat(c.close, depth) + `}}`)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			texts := p.redactedTexts("pay", params)
			runtime.ReadMemStats(&after)
			if !slices.Contains(texts, secret) {
				t.Fatalf("the secret at the bottom is not among the %d texts", len(texts))
			}
			if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(64*len(params)); got > limit {
				t.Fatalf("finding the texts of a value of %d bytes nested %d deep allocated %d MB (limit %d MB): once per level", len(params), depth, got>>20, limit>>20)
			}
		})
	}
}
