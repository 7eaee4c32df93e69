package jsonrpc

import (
	"encoding/json"
	"math/big"
	"math/rand"
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

// bigNumberValue is numberValue with math/big doing the exponent's arithmetic: the reference
// numberValue must agree with. (numberValue once was this: math/big converts a decimal string
// in time quadratic in its length, and an id "1e" followed by a million digits, valid JSON,
// held the router 3.3 s; see BenchmarkIDKeyLongExponent.)
func bigNumberValue(lit []byte) string {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	digits := make([]byte, 0, len(lit))
	i, frac := 0, 0
	for ; i < len(lit) && lit[i] >= '0' && lit[i] <= '9'; i++ {
		digits = append(digits, lit[i])
	}
	if i < len(lit) && lit[i] == '.' {
		for i++; i < len(lit) && lit[i] >= '0' && lit[i] <= '9'; i++ {
			digits = append(digits, lit[i])
			frac++
		}
	}
	exp := new(big.Int)
	if i < len(lit) {
		e := string(lit[i+1:])
		if len(e) > 0 && e[0] == '+' {
			e = e[1:]
		}
		exp.SetString(e, 10)
	}
	for len(digits) > 0 && digits[0] == '0' {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		return "0"
	}
	trailing := 0
	for digits[len(digits)-1-trailing] == '0' {
		trailing++
	}
	digits = digits[:len(digits)-trailing]
	exp.Add(exp, big.NewInt(int64(trailing-frac)))
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + string(digits) + "e" + exp.String()
}

// numberValue keys numbers as the math/big reference does: exponents of 19 digits and more
// (beyond int64) included.
func TestNumberValueAgreesWithMathBig(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	digitsOf := func(n int, lead bool) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			c := byte('0' + r.Intn(10))
			if i == 0 && !lead && n > 1 && c == '0' {
				c = '1'
			}
			if r.Intn(4) == 0 {
				c = '0'
				if i == 0 && !lead && n > 1 {
					c = '9'
				}
			}
			b.WriteByte(c)
		}
		return b.String()
	}
	fixed := []string{"1e1000000000000000000", "1e-1000000000000000000", "10e999999999999999999", "0.1e1000000000000000001",
		"100e-1000000000000000002", "5e999999999999999999", "5e-999999999999999999", "1e9223372036854775807",
		"1000e-9223372036854775807", "0.0001e-99999999999999999999", "1E+0000000000000000000000002", "-7.500e-00"}
	for _, s := range fixed {
		if got, want := numberValue([]byte(s)), bigNumberValue([]byte(s)); got != want {
			t.Errorf("numberValue(%s) = %q, math/big gives %q", s, got, want)
		}
	}
	for n := 0; n < 200000; n++ {
		s := ""
		if r.Intn(2) == 0 {
			s = "-"
		}
		s += digitsOf(1+r.Intn(25), false)
		if r.Intn(2) == 0 {
			s += "." + digitsOf(1+r.Intn(25), true)
		}
		if r.Intn(3) > 0 {
			s += []string{"e", "E", "e+", "e-", "E-"}[r.Intn(5)] + digitsOf(1+r.Intn(40), true)
		}
		if got, want := numberValue([]byte(s)), bigNumberValue([]byte(s)); got != want {
			t.Fatalf("numberValue(%s) = %q, math/big gives %q", s, got, want)
		}
	}
}

// An id whose exponent has a million digits costs time linear in its length (math/big took
// 3.3 s for it: go test -run '^$' -bench IDKeyLongExponent ./pkg/internal/jsonrpc).
func BenchmarkIDKeyLongExponent(b *testing.B) {
	id := []byte("1e" + strings.Repeat("7", 1_000_000))
	b.SetBytes(int64(len(id)))
	for b.Loop() {
		_ = IDKey(id)
	}
}
