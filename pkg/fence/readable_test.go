package fence

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/canon"
)

// TestNestedWithin checks nestedWithin against the nesting it counts, on both sides of the
// limit, with brackets inside strings (which do not nest), and on the paths it takes: short,
// few brackets, and the byte-by-byte scan.
func TestNestedWithin(t *testing.T) {
	deep := func(n int, open, inner, close string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	pad := `"` + strings.Repeat("x", 100) + `"`
	for _, tc := range []struct {
		json  string
		limit int
		want  bool
	}{
		{`1`, 0, true},
		{`[]`, 0, false},
		{`[]`, 1, true},
		{deep(3, `[`, ``, `]`), 2, false},
		{deep(3, `[`, ``, `]`), 3, true},
		{deep(3, `{"a":`, `1`, `}`), 2, false},
		// brackets in strings, escaped quotes before them, padding past the short cut
		{`["[[[[[[[[[[\"[[[[",` + pad + `]`, 1, true},
		{`["\\",[[]],` + pad + `]`, 2, false},
		{`["\\",[[]],` + pad + `]`, 3, true},
		{`[[],[],[],[],[],[],[],[],[],[],[],` + pad + `]`, 2, true},
		{deep(10, `[`, pad, `]`), 9, false},
		{deep(10, `[ `, pad, ` ]`), 10, true},
	} {
		if !canon.Valid([]byte(tc.json)) {
			t.Fatalf("%.60s is not JSON", tc.json)
		}
		if got := nestedWithin([]byte(tc.json), tc.limit); got != tc.want {
			t.Errorf("nestedWithin(%.60s, %d) = %v, want %v", tc.json, tc.limit, got, tc.want)
		}
	}
	limit := MaxNesting
	for _, n := range []int{limit - 1, limit, limit + 1, canon.MaxDepth} {
		if got, want := readable([]byte(deep(n, `[`, ``, `]`))), n <= limit; got != want {
			t.Errorf("readable(nested %d) = %v, want %v", n, got, want)
		}
	}
}
