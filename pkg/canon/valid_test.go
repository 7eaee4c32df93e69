package canon

import (
	"encoding/json"
	"strings"
	"testing"
)

var validSeeds = []string{
	``, ` `, `null`, `true`, `false`, `nul`, `truex`, `0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e`, `1e+`,
	`1E-7`, `-12.5e+3`, `1.e3`, `"`, `""`, `"a"b`, `"\u12"`, `"\u12ab"`, `"\uZZZZ"`, `"\x"`, `"\/\b\f\n\r\t\"\\"`,
	"\"\x1f\"", "\"\x7f\xff\xfe\"", "\"é😀\"", `[]`, `[ ]`, `[1,]`, `[,1]`, `[1 2]`, `[1,2]`, `{}`, `{ }`, `{"a"}`,
	`{"a":}`, `{"a":1,}`, `{"a":1,"b":[true,{"c":null}]}`, `{1:2}`, `{"a" : 1 , "b" : 2 }`, `[}`, `{]`, `[[[]]]`,
	`[[[]]`, `[]]`, " \t\r\n[1]\n", "[1]\v", "\ufeff1", `1 2`, `{"a":1}{}`, `"\ud800"`,
}

// FuzzValid checks Valid against encoding/json.Valid.
func FuzzValid(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

// TestValidNesting checks the nesting limit on both sides of encoding/json's.
func TestValidNesting(t *testing.T) {
	for _, n := range []int{maxNesting - 1, maxNesting, maxNesting + 1} {
		for _, open := range []string{"[", `{"k":`} {
			closer := map[string]string{"[": "]", `{"k":`: "}"}[open]
			for _, inner := range []string{"", "1"} {
				b := []byte(strings.Repeat(open, n) + inner + strings.Repeat(closer, n))
				if got, want := Valid(b), json.Valid(b); got != want {
					t.Errorf("depth %d %q inner %q: Valid %v, encoding/json %v", n, open, inner, got, want)
				}
			}
		}
	}
	if !Valid([]byte(strings.Repeat("[", maxNesting) + strings.Repeat("]", maxNesting))) {
		t.Error("the deepest nesting encoding/json accepts was refused")
	}
}

// TestValidLongStrings puts each byte that ends or breaks a string, and some that do not, at
// every position of strings around the eight bytes stringEnd skips at a time, and compares
// with encoding/json.
func TestValidLongStrings(t *testing.T) {
	specials := []string{`"`, `\`, `\"`, `\\`, `\n`, `\u00e9`, `\u00`, "\x00", "\x1f", "\n", " ", "\x7f", "\x80", "\xff", "é", "😀", "!", "#", "[", "]", "\\x"}
	for n := range 26 {
		for pos := 0; pos <= n; pos++ {
			for _, sp := range specials {
				s := strings.Repeat("a", pos) + sp + strings.Repeat("b", n-pos)
				for _, b := range []string{`"` + s + `"`, `["` + s + `",1]`, `{"` + s + `":"` + s + `"}`} {
					if got, want := Valid([]byte(b)), json.Valid([]byte(b)); got != want {
						t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
					}
				}
			}
		}
	}
}
