package jsonrpc

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// IDKey is the value a request id (a valid JSON literal) stands for, the same for every
// spelling of it: a client compares ids as values, so a notifications/cancelled may name
// request "q" as "\u0071", or request 5 as 5.0. A string is its characters with the escapes
// decoded, a lone surrogate kept as itself (so "x\udbff" and "x\udbfe" stay two ids); a number
// is its exact value (5, 5.0, 50e-1 alike; 9007199254740993 not 9007199254740992); and the
// type tells "5" from 5. Any other value is keyed by its bytes.
func IDKey(raw []byte) string {
	switch {
	case len(raw) == 0:
		return ""
	case raw[0] == '"':
		if bytes.IndexByte(raw, '\\') < 0 { // the common case, in one allocation
			var b strings.Builder
			b.Grow(len(raw) - 1)
			b.WriteByte('s')
			b.Write(raw[1 : len(raw)-1])
			return b.String()
		}
		return "s" + stringValue(raw)
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		if k, ok := integerKey(raw); ok {
			return k
		}
		return "n" + numberValue(raw)
	}
	return "o" + string(raw)
}

// integerKey is numberValue's key for an integer written plainly (no fraction, no exponent,
// no leading zero), in one allocation.
func integerKey(raw []byte) (string, bool) {
	digits := raw
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 1000 || digits[0] == '0' {
		return "", false // 0, -0 and the like take the long way
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	trailing := 0
	for digits[len(digits)-1-trailing] == '0' {
		trailing++
	}
	var b strings.Builder
	b.Grow(len(raw) + 6)
	b.WriteByte('n')
	b.Write(raw[:len(raw)-trailing])
	b.WriteByte('e')
	b.WriteString(strconv.Itoa(trailing))
	return b.String(), true
}

// stringValue decodes the valid JSON string literal lit, which holds an escape, writing a
// lone surrogate as its own three bytes (WTF-8) rather than U+FFFD, which it would share with
// every other.
func stringValue(lit []byte) string {
	s := lit[1 : len(lit)-1]
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			out = append(out, s[i])
			i++
			continue
		}
		c := s[i+1]
		i += 2
		switch c {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(s[i:])
			i += 4
			if utf16.IsSurrogate(r) && r < 0xdc00 && i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
				if lo := hex4(s[i+2:]); lo >= 0xdc00 && lo <= 0xdfff {
					out = utf8.AppendRune(out, utf16.DecodeRune(r, lo))
					i += 6
					continue
				}
			}
			if utf16.IsSurrogate(r) {
				out = append(out, 0xed, byte(0x80|(r>>6)&0x3f), byte(0x80|r&0x3f))
				continue
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, c)
		}
	}
	return string(out)
}

// hex4 reads the four hex digits of a \u escape (valid JSON: they are there).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// numberValue writes the exact value of the valid JSON number lit as its significant digits
// and a power of ten ("5e0" for 5, 5.0 and 50e-1; "0" for every zero, -0 too).
func numberValue(lit []byte) string {
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
	var exp []byte // the exponent's digits, no leading zero
	expNeg := false
	if i < len(lit) { // e or E, a sign perhaps, digits
		e := lit[i+1:]
		if e[0] == '+' || e[0] == '-' {
			expNeg = e[0] == '-'
			e = e[1:]
		}
		for len(e) > 0 && e[0] == '0' {
			e = e[1:]
		}
		exp = e
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
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + string(digits) + "e" + shiftExponent(exp, expNeg, int64(trailing-frac))
}

// shiftExponent writes the exponent whose digits (no leading zero) and sign are given plus
// delta, in decimal, in time linear in its length: math/big's conversion of a decimal string is
// quadratic, and a valid JSON number may carry a 60 MB exponent (one took hours).
func shiftExponent(digits []byte, neg bool, delta int64) string {
	if len(digits) <= 18 { // fits an int64, and so does the sum (|delta| < 2^31)
		var e int64
		for _, c := range digits {
			e = e*10 + int64(c-'0')
		}
		if neg {
			e = -e
		}
		return strconv.FormatInt(e+delta, 10)
	}
	// |exponent| >= 10^18 > |delta|: the sum has the exponent's sign, and its magnitude is
	// the exponent's moved by delta toward or away from zero.
	if neg {
		delta = -delta
	}
	out := append([]byte(nil), digits...)
	carry := delta
	for j := len(out) - 1; j >= 0 && carry != 0; j-- {
		v := int64(out[j]-'0') + carry
		q, r := v/10, v%10
		if r < 0 {
			r += 10
			q--
		}
		out[j], carry = byte('0'+r), q
	}
	if carry > 0 {
		out = append([]byte(strconv.FormatInt(carry, 10)), out...)
	}
	for len(out) > 1 && out[0] == '0' {
		out = out[1:]
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
