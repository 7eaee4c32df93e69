package canon

import (
	"bytes"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// fastJSON canonicalises the common shape of tool arguments and results (objects, arrays,
// literals, numbers, strings without escapes) in one pass with few allocations. It reports
// false for anything else (escapes in strings, invalid UTF-8, duplicate keys, deep nesting,
// malformed input), and JSON then hands the input to the library, which is the reference:
// FuzzFastMatchesLibrary checks that whenever the fast path answers, it answers exactly
// what the library does. Numbers other than small integers are formatted by the library's
// own ECMAScript number formatter.
func fastJSON(in []byte) ([]byte, bool) {
	f := fast{in: in, out: make([]byte, 0, len(in))}
	if !f.value(0) {
		return nil, false
	}
	f.ws()
	if f.i != len(in) {
		return nil, false
	}
	return f.out, true
}

const fastMaxDepth = 64

type fast struct {
	in  []byte
	i   int
	out []byte
}

type member struct {
	key        []byte // raw key bytes (no quotes, no escapes)
	start, end int    // the member's value in out
}

func (f *fast) ws() {
	for f.i < len(f.in) {
		switch f.in[f.i] {
		case ' ', '\t', '\n', '\r':
			f.i++
		default:
			return
		}
	}
}

func (f *fast) value(depth int) bool {
	if depth > fastMaxDepth {
		return false
	}
	f.ws()
	if f.i >= len(f.in) {
		return false
	}
	switch c := f.in[f.i]; {
	case c == '{':
		return f.object(depth)
	case c == '[':
		return f.array(depth)
	case c == '"':
		s, ok := f.str()
		if !ok {
			return false
		}
		f.out = append(f.out, '"')
		f.out = append(f.out, s...)
		f.out = append(f.out, '"')
		return true
	case c == 't':
		return f.literal("true")
	case c == 'f':
		return f.literal("false")
	case c == 'n':
		return f.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return f.number()
	}
	return false
}

func (f *fast) literal(lit string) bool {
	if !bytes.HasPrefix(f.in[f.i:], []byte(lit)) {
		return false
	}
	f.i += len(lit)
	f.out = append(f.out, lit...)
	return true
}

// str reads a string that needs no escaping in either direction: no backslash, no control
// character, valid UTF-8. It returns the bytes between the quotes.
func (f *fast) str() ([]byte, bool) {
	start := f.i + 1
	for j := start; j < len(f.in); j++ {
		switch c := f.in[j]; {
		case c == '"':
			s := f.in[start:j]
			if !utf8.Valid(s) {
				return nil, false
			}
			f.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func (f *fast) number() bool {
	start := f.i
	j := f.i
	if f.in[j] == '-' {
		j++
	}
	digits := j
	for j < len(f.in) && f.in[j] >= '0' && f.in[j] <= '9' {
		j++
	}
	intEnd := j
	for j < len(f.in) {
		c := f.in[j]
		if c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			j++
			continue
		}
		break
	}
	tok := f.in[start:j]
	f.i = j
	n := intEnd - digits
	// A plain integer below 10^15 (within IEEE exactness) is already in ECMAScript form,
	// unless it has a leading zero or is -0.
	if j == intEnd && n >= 1 && n <= 15 && (f.in[digits] != '0' || n == 1) && !(n == 1 && f.in[digits] == '0' && digits != start) {
		f.out = append(f.out, tok...)
		return true
	}
	if !validNumber(tok) {
		return false
	}
	v, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return false
	}
	s, err := jcs.NumberToJSON(v)
	if err != nil {
		return false
	}
	f.out = append(f.out, s...)
	return true
}

// validNumber checks the JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	return i == len(b)
}

func (f *fast) array(depth int) bool {
	f.i++ // [
	f.out = append(f.out, '[')
	f.ws()
	if f.i < len(f.in) && f.in[f.i] == ']' {
		f.i++
		f.out = append(f.out, ']')
		return true
	}
	for {
		if !f.value(depth + 1) {
			return false
		}
		f.ws()
		if f.i >= len(f.in) {
			return false
		}
		switch f.in[f.i] {
		case ',':
			f.i++
			f.out = append(f.out, ',')
		case ']':
			f.i++
			f.out = append(f.out, ']')
			return true
		default:
			return false
		}
	}
}

func (f *fast) object(depth int) bool {
	f.i++ // {
	base := len(f.out)
	f.ws()
	if f.i < len(f.in) && f.in[f.i] == '}' {
		f.i++
		f.out = append(f.out, '{', '}')
		return true
	}
	var ms []member
	for {
		f.ws()
		if f.i >= len(f.in) || f.in[f.i] != '"' {
			return false
		}
		key, ok := f.str()
		if !ok {
			return false
		}
		f.ws()
		if f.i >= len(f.in) || f.in[f.i] != ':' {
			return false
		}
		f.i++
		start := len(f.out)
		if !f.value(depth + 1) {
			return false
		}
		ms = append(ms, member{key: key, start: start, end: len(f.out)})
		f.ws()
		if f.i >= len(f.in) {
			return false
		}
		if f.in[f.i] == ',' {
			f.i++
			continue
		}
		if f.in[f.i] != '}' {
			return false
		}
		f.i++
		break
	}
	// RFC 8785 orders keys by UTF-16 code units; byte order of UTF-8 agrees unless a key has a
	// character above U+FFFF (lead byte 0xF0 and up), which goes to the library.
	for _, m := range ms {
		for _, c := range m.key {
			if c >= 0xF0 {
				return false
			}
		}
	}
	slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	for k := 1; k < len(ms); k++ {
		if bytes.Equal(ms[k-1].key, ms[k].key) {
			return false // duplicate key: the library decides (it refuses)
		}
	}
	values := bytes.Clone(f.out[base:])
	f.out = append(f.out[:base], '{')
	for k, m := range ms {
		if k > 0 {
			f.out = append(f.out, ',')
		}
		f.out = append(f.out, '"')
		f.out = append(f.out, m.key...)
		f.out = append(f.out, '"', ':')
		f.out = append(f.out, values[m.start-base:m.end-base]...)
	}
	f.out = append(f.out, '}')
	return true
}
