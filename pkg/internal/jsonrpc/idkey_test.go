package jsonrpc

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// IDKey makes every spelling of one id value the same key, and keeps apart ids a client tells
// apart: strings from numbers, one lone surrogate from another, 2^53+1 from 2^53.
func TestIDKeyIsTheIDsValue(t *testing.T) {
	same := [][]string{
		{`"q"`, `"\u0071"`, `"\u0071"`},
		{`"a/b"`, `"a\/b"`, `"\u0061\u002fb"`},
		{`"😀"`, `"\ud83d\ude00"`, `"\uD83D\uDE00"`},
		{`"x\udbff"`, `"\u0078\uDBFF"`},
		{`"x�"`, `"x\ufffd"`},
		{`"\n\t\"\\"`, `"\u000a\u0009\u0022\u005c"`},
		{`5`, `5.0`, `5e0`, `50e-1`, `0.5E+1`, `5.000`, `500E-2`},
		{`-12`, `-1.2e1`, `-120e-1`},
		{`0`, `-0`, `0.0`, `0e99`, `-0.000e-5`},
		{`9007199254740993`, `9007199254740993.0`, `90071992547409930e-1`},
		{`1e400`, `10e399`, `0.1e401`},
		{`0.001`, `1e-3`, `1E-03`},
	}
	for _, group := range same {
		for _, s := range group[1:] {
			if IDKey([]byte(s)) != IDKey([]byte(group[0])) {
				t.Errorf("IDKey(%s) = %q, IDKey(%s) = %q: want the same", s, IDKey([]byte(s)), group[0], IDKey([]byte(group[0])))
			}
		}
	}
	apart := []string{`"5"`, `5`, `"x\udbff"`, `"x\udbfe"`, `"x\ufffd"`, `9007199254740993`, `9007199254740992`,
		`1e400`, `1e401`, `-5`, `"-5"`, `0.5`, `50`, `"q"`, `"Q"`, `"\ud83d"`, `"\ude00"`, `"\ud83d\u0000"`, `true`, `"true"`}
	seen := map[string]string{}
	for _, s := range apart {
		k := IDKey([]byte(s))
		if other, dup := seen[k]; dup {
			t.Errorf("IDKey(%s) = IDKey(%s) = %q: two ids a client tells apart", s, other, k)
		}
		seen[k] = s
	}
}

// Two numbers have one IDKey exactly when they have one value.
func FuzzIDKeyNumbers(f *testing.F) {
	f.Add("5", "5.0")
	f.Add("-0", "0e7")
	f.Add("9007199254740993", "9007199254740992")
	f.Add("12.5e-3", "0.0125")
	f.Add("100", "1e2")
	f.Fuzz(func(t *testing.T, a, b string) {
		ra, oka := smallNumber(a)
		rb, okb := smallNumber(b)
		if !oka || !okb {
			return
		}
		if same := IDKey([]byte(a)) == IDKey([]byte(b)); same != (ra.Cmp(rb) == 0) {
			t.Fatalf("%s and %s: IDKeys %q and %q, values equal: %v", a, b, IDKey([]byte(a)), IDKey([]byte(b)), ra.Cmp(rb) == 0)
		}
	})
}

// smallNumber is the value of s if it is one JSON number with an exponent big.Rat can hold
// without ado.
func smallNumber(s string) (*big.Rat, bool) {
	if len(s) == 0 || len(s) > 60 || !json.Valid([]byte(s)) || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return nil, false
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		if e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+")); err != nil || e > 400 || e < -400 {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(strings.TrimSpace(s))
	return r, ok && strings.TrimSpace(s) == s
}
