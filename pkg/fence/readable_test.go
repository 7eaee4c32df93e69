package fence

import (
	"strings"
	"testing"
	"unicode/utf8"

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

// A result holding invalid UTF-8 is valid JSON to canon.Valid (as to encoding/json), but a
// cert written with it as its readable result is not UTF-8: the public JSON has it in
// result_bytes alone, with a null result, and stays valid UTF-8.
func TestInvalidUTF8ResultIsNotReadable(t *testing.T) {
	res := []byte("{\"s\":\"caf\xe9\"}")
	if !canon.Valid(res) || readable(res) {
		t.Fatalf("canon.Valid %v, readable %v; want true, false", canon.Valid(res), readable(res))
	}
	c := Cert{Intent: "i", Result: res, ResultSHA256: canon.Sum(res)}
	b, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(b) || !strings.Contains(string(b), `"result":null`) {
		t.Fatalf("public cert JSON %q: want valid UTF-8 with a null result", b)
	}
	var back Cert
	if err := back.UnmarshalJSON(b); err != nil || string(back.Result) != string(res) {
		t.Fatalf("read back %q, %v; want the exact bytes %q", back.Result, err, res)
	}
	rec, err := EncodeRecord(&Record{Intent: "i", State: StateDone, Cert: &c})
	if err != nil || !utf8.Valid(rec) {
		t.Fatalf("stored record %q, %v: want valid UTF-8", rec, err)
	}
}
