package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// The collisions of issue 12 item 1: each pair is two distinct values that the double-based
// RFC 8785 form merged into one identity.
func TestDistinctNumbersStayDistinct(t *testing.T) {
	pairs := [][2]string{
		{"9007199254740993", "9007199254740992"},
		{"12345678901234567890", "12345678901234567891"},
		{"0.1", "0.10000000000000000555"},
		{"1e400", "1e401"},
		{"-1e-400", "1e-400"},
		{"100000000000000000000000", "99999999999999999999999"},
	}
	for _, p := range pairs {
		a, err := Fingerprint("charge", []byte(`{"amount":`+p[0]+`}`))
		if err != nil {
			t.Fatalf("%s: %v", p[0], err)
		}
		b, err := Fingerprint("charge", []byte(`{"amount":`+p[1]+`}`))
		if err != nil {
			t.Fatalf("%s: %v", p[1], err)
		}
		if a == b {
			t.Errorf("%s and %s share an identity", p[0], p[1])
		}
	}
}

func TestNumberCanonicalForm(t *testing.T) {
	cases := []struct{ in, want string }{
		{"1", "1"}, {"1.0", "1"}, {"1e0", "1"}, {"10e-1", "1"}, {"0.1e1", "1"},
		{"-0", "0"}, {"0.000", "0"}, {"-0e5", "0"},
		{"4.9e3", "4900"}, {"2.50", "2.5"}, {"1e21", "1e+21"}, {"1e20", "100000000000000000000"},
		{"1E-7", "1e-7"}, {"0.000001", "0.000001"}, {"123e-2", "1.23"},
		{"9007199254740993", "9007199254740993"},
		{"12345678901234567890", "12345678901234567890"},
		{"0.10000000000000000555", "0.10000000000000000555"},
		{"1e400", "1e+400"}, {"-1.5e-400", "-1.5e-400"},
		{"123456789012345678901234", "1.23456789012345678901234e+23"},
	}
	for _, c := range cases {
		got, err := JSON([]byte(c.in))
		if err != nil {
			t.Fatalf("JSON(%s): %v", c.in, err)
		}
		if string(got) != c.want {
			t.Errorf("JSON(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestAmbiguousInputRefused(t *testing.T) {
	for _, in := range []string{
		`{"a":1,"a":2}`, `{"a":{"x":1,"x":1}}`, `[{"k":1,"\u006b":2}]`, // duplicates, at any depth, after unescaping
		`"\ud83d"`, `"\udc00"`, `"\ud83d\u0041"`, // lone surrogates
		"\"\xff\"", "{\"\xc3\":1}", // invalid UTF-8
		"\"a\x01\"", `1e1000000001`, `01`, `1.`, `.5`, `+1`, `"\x"`,
	} {
		if out, err := JSON([]byte(in)); err == nil {
			t.Errorf("JSON(%q) = %s, want an error", in, out)
		}
	}
	if _, err := JSON([]byte(`{"a":1,"a":1}`)); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("duplicate key error = %v, want ErrDuplicateKey", err)
	}
	if got, err := JSON([]byte(`"\ud83d\ude00\u00e9\/"`)); err != nil || string(got) != "\"😀é/\"" {
		t.Errorf("surrogate pair: %s %v", got, err)
	}
}

// docs/identity.md's examples of the exponent bound: a number is refused when its value,
// written as a whole number without trailing zeros times a power of ten, needs a power beyond
// ±10^9, whatever exponent it is written with.
func TestExponentBound(t *testing.T) {
	for in, want := range map[string]string{
		"1e1000000000": "1e+1000000000", "0.1e1000000001": "1e+1000000000", "1.5e1000000000": "1.5e+1000000000",
		"100e-1000000002": "1e-1000000000", "1e1000000001": "", "10e1000000000": "", "1.5e-1000000000": "",
		"15e-1000000001": "", "1" + strings.Repeat("0", 100) + "e999999950": "",
		"0e99999999999": "0", "-0.0E-99999999999999999999999": "0", "0.000e1" + strings.Repeat("9", 400): "0",
		"1e99999999999": "", "0.001e99999999999999999999": "", "1e-99999999999999999999": "",
	} {
		got, err := JSON([]byte(in))
		if want == "" && (err == nil || !strings.Contains(err.Error(), "exponent beyond")) || want != "" && (err != nil || string(got) != want) {
			t.Errorf("JSON(%.30s) = %s, %v; want %q (\"\" for refused)", in, got, err, want)
		}
	}
}

// ratOf reads a JSON number token exactly; ok is false for tokens this test does not judge
// (invalid, or exponents so large that big.Rat would allocate gigabytes).
func ratOf(tok string) (*big.Rat, bool) {
	_, _, exp, err := decimal([]byte(tok))
	if err != nil || exp > 5000 || exp < -5000 || len(tok) > 2000 {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(tok)
	return r, ok
}

// FuzzNumberIdentity: two numbers share a canonical form exactly when they are the same
// value, judged by math/big's exact rationals.
func FuzzNumberIdentity(f *testing.F) {
	for _, p := range [][2]string{
		{"9007199254740993", "9007199254740992"}, {"0.1", "0.10000000000000000555"}, {"1", "1.0"},
		{"1e0", "10e-1"}, {"-0", "0"}, {"1e21", "1000000000000000000000"}, {"5e-324", "4.9e-324"},
		{"123.456e5", "12345600"}, {"0.000001", "1e-6"}, {"1.7976931348623157e308", "1.7976931348623158e308"},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ra, oka := ratOf(a)
		rb, okb := ratOf(b)
		if !oka || !okb {
			return
		}
		ca, err := JSON([]byte(a))
		if err != nil {
			t.Fatalf("valid number %q refused: %v", a, err)
		}
		cb, err := JSON([]byte(b))
		if err != nil {
			t.Fatalf("valid number %q refused: %v", b, err)
		}
		same := ra.Cmp(rb) == 0
		if same != bytes.Equal(ca, cb) {
			t.Fatalf("%q -> %s, %q -> %s: equal values %v, equal forms %v", a, ca, b, cb, same, !same)
		}
		// The form denotes the value exactly.
		if rc, ok := ratOf(string(ca)); !ok || rc.Cmp(ra) != 0 {
			t.Fatalf("%q -> %s does not denote the same value", a, ca)
		}
	})
}

// FuzzMatchesLibrary: wherever the RFC 8785 library and this package both answer, the answers
// are byte for byte equal except at numbers the library rounded to a double; there this
// package keeps the exact value. Inputs the library accepts but this package refuses must be
// duplicate names, invalid UTF-8, lone surrogates or huge exponents.
func FuzzMatchesLibrary(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2.50,-0,1e21,1E-7,true,null,"x"]}`, `{"a":{"a":1},"a":2}`, `[01]`, `-0`, `0`, `-1`,
		`{"\u00e9":1,"z":2,"é":3}`, `"\u0041"`, `123456789012345`, `1234567890123456`, `{"😀":1,"\uffff":2}`, `[1,]`, `{"a" 1}`, ` [ ] `, `1.0`,
		`[9007199254740993,0.1,0.10000000000000000555]`, `"\ud800"`, `{"\ud83d\ude00":1,"\ue000":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := JSON(in)
		want, lerr := jcs.Transform(in)
		if err != nil {
			return // refusing is always allowed; accepting what is invalid is not (below)
		}
		if !json.Valid(in) {
			t.Fatalf("accepted invalid JSON %q", in)
		}
		if lerr != nil {
			return // e.g. numbers beyond double range: the library cannot say
		}
		if bytes.Equal(got, want) {
			return
		}
		var g, w any
		dg := json.NewDecoder(bytes.NewReader(got))
		dg.UseNumber()
		dw := json.NewDecoder(bytes.NewReader(want))
		dw.UseNumber()
		if dg.Decode(&g) != nil || dw.Decode(&w) != nil {
			t.Fatalf("outputs do not decode: %q %q", got, want)
		}
		if !onlyRoundedNumbersDiffer(g, w) {
			t.Fatalf("ours %q, library %q for %q", got, want, in)
		}
	})
}

// onlyRoundedNumbersDiffer walks two decoded trees: strings, names and shapes must agree; a
// number may differ only where the two are different values (the library rounded).
func onlyRoundedNumbersDiffer(g, w any) bool {
	switch g := g.(type) {
	case map[string]any:
		wm, ok := w.(map[string]any)
		if !ok || len(wm) != len(g) {
			return false
		}
		for k, v := range g {
			if wv, ok := wm[k]; !ok || !onlyRoundedNumbersDiffer(v, wv) {
				return false
			}
		}
		return true
	case []any:
		wa, ok := w.([]any)
		if !ok || len(wa) != len(g) {
			return false
		}
		for i := range g {
			if !onlyRoundedNumbersDiffer(g[i], wa[i]) {
				return false
			}
		}
		return true
	case json.Number:
		wn, ok := w.(json.Number)
		if !ok {
			return false
		}
		if g == wn {
			return true
		}
		rg, ok1 := ratOf(string(g))
		rw, ok2 := ratOf(string(wn))
		return !ok1 || !ok2 || rg.Cmp(rw) != 0
	default:
		return g == w
	}
}

// TestLongStringsMatchLibrary puts each byte that ends, escapes or breaks a string, and some
// that do not, at every position of strings around the eight bytes the parser's fast scan
// skips at a time: the canonical form must be the RFC 8785 library's, and what the library
// refuses (a control character, a bad escape) must be refused.
func TestLongStringsMatchLibrary(t *testing.T) {
	specials := []string{`"`, `\`, `\"`, `\\`, `\n`, `\/`, `\u00e9`, `\u001f`, `\u00`, "\x00", "\x1f", "\n", " ", "\x7f", "é", "😀", "<", "\u2028"}
	for n := range 26 {
		for pos := 0; pos <= n; pos++ {
			for _, sp := range specials {
				s := strings.Repeat("a", pos) + sp + strings.Repeat("b", n-pos)
				for _, in := range []string{`"` + s + `"`, `["` + s + `",1]`, `{"` + s + `":"` + s + `","a":0}`} {
					got, err := JSON([]byte(in))
					want, lerr := jcs.Transform([]byte(in))
					if (err == nil) != (lerr == nil) || !bytes.Equal(got, want) {
						t.Fatalf("JSON(%q) = %q, %v; the library gives %q, %v", in, got, err, want, lerr)
					}
				}
			}
		}
	}
}
