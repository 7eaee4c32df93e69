package canon

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth bounds the nesting of arrays and objects accepted for canonicalisation.
const MaxDepth = 10000

// maxExponent bounds the decimal exponent of a number, its digits taken as a whole number
// (1e1000000001 is refused, not expanded; 1e1000000000 is accepted): far beyond any value a
// tool means, small enough that no arithmetic overflows.
const maxExponent = 1_000_000_000

// canonical parses one JSON text and writes its canonical form: RFC 8785 structure (members
// sorted by UTF-16 code units, no white space, minimal string escapes) with numbers written
// from their exact decimal value (see formatNumber). It refuses what a careful server would
// refuse or read differently: invalid UTF-8, lone surrogate escapes, duplicate member names
// (after unescaping), control characters in strings, nesting beyond MaxDepth.
func canonical(in []byte) ([]byte, error) { return canonicalWith(in, reorderInPlace) }

// canonicalWith is canonical with objects up to inPlace bytes reordered in place (tests send
// every object down the deferred path with 0).
func canonicalWith(in []byte, inPlace int) ([]byte, error) {
	p := parser{in: in, out: make([]byte, 0, len(in)), inPlace: inPlace}
	return p.run()
}

func (p *parser) run() ([]byte, error) {
	if err := p.value(0); err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.in) {
		return nil, p.errf("trailing data after the JSON value")
	}
	if len(p.deferred) == 0 {
		return p.out, nil
	}
	p.moved += len(p.out)
	return p.reorder(make([]byte, 0, len(p.out)), 0, len(p.out), 0, len(p.deferred)), nil
}

type parser struct {
	in       []byte
	i        int
	out      []byte
	buf      []byte // scratch for decoded strings
	scratch  []byte // scratch for an object reordered in place
	deferred []deferredObject
	// members holds the members of the objects being parsed, the innermost's last: an object
	// pushes each member once its value (and the objects inside it, which pop theirs) has been
	// read. One slice for the whole text, grown by doubling: a slice per object grown by
	// append (by a quarter once large) allocated five times the members of a large object, in
	// fresh pages each time (2,000,000 members, 34 MB: 648 MB allocated and 3.2-3.5 s in a new
	// process, now 286 MB and 1.6-1.8 s).
	members []member
	inPlace int // see reorderInPlace
	moved   int // bytes of output copied again to put members in order (tests read it)
}

func (p *parser) errf(format string, a ...any) error {
	return fmt.Errorf("invalid JSON at byte %d: %s", p.i, fmt.Sprintf(format, a...))
}

func (p *parser) ws() {
	for p.i < len(p.in) {
		switch p.in[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) error {
	if depth > MaxDepth {
		return p.errf("nested deeper than %d", MaxDepth)
	}
	p.ws()
	if p.i >= len(p.in) {
		return p.errf("unexpected end of input")
	}
	switch c := p.in[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.strBytes()
		if err != nil {
			return err
		}
		// AppendString only reads s: the value is written without a copy of its own (a
		// 16 MiB string argument cost 16 MiB more, in fresh pages).
		p.out = AppendString(p.out, unsafe.String(unsafe.SliceData(s), len(s)))
		return nil
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return p.errf("unexpected character %q", p.in[p.i])
}

func (p *parser) literal(lit string) error {
	if !bytes.HasPrefix(p.in[p.i:], []byte(lit)) {
		return p.errf("invalid literal")
	}
	p.i += len(lit)
	p.out = append(p.out, lit...)
	return nil
}

// str reads a string token and returns its decoded value (valid UTF-8). The returned string
// aliases no input.
func (p *parser) str() (string, error) {
	b, err := p.strBytes()
	return string(b), err
}

// strBytes is str whose value aliases the input or p's scratch: it is valid until the next
// call.
func (p *parser) strBytes() ([]byte, error) {
	p.i++ // opening quote
	start := p.i
	// Fast scan: no escape, no control character (eight bytes at a time while it can).
	j := p.i
	for len(p.in)-j >= 8 && inString8(binary.LittleEndian.Uint64(p.in[j:])) {
		j += 8
	}
	for ; j < len(p.in); j++ {
		c := p.in[j]
		if c == '"' {
			s := p.in[start:j]
			if !utf8.Valid(s) {
				p.i = start
				return nil, p.errf("string is not valid UTF-8")
			}
			p.i = j + 1
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
	}
	b := p.buf[:0]
	for {
		if p.i >= len(p.in) {
			return nil, p.errf("unterminated string")
		}
		c := p.in[p.i]
		switch {
		case c == '"':
			p.i++
			p.buf = b
			return b, nil
		case c < 0x20:
			return nil, p.errf("control character in string")
		case c == '\\':
			if p.i+1 >= len(p.in) {
				return nil, p.errf("unterminated escape")
			}
			e := p.in[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, err := p.hex4()
				if err != nil {
					return nil, err
				}
				if utf16.IsSurrogate(r) {
					if r >= 0xDC00 || p.i+1 >= len(p.in) || p.in[p.i] != '\\' || p.in[p.i+1] != 'u' {
						return nil, p.errf("lone surrogate \\u%04x", r)
					}
					p.i += 2
					r2, err := p.hex4()
					if err != nil {
						return nil, err
					}
					if r2 < 0xDC00 || r2 > 0xDFFF {
						return nil, p.errf("lone surrogate \\u%04x", r)
					}
					r = utf16.DecodeRune(r, r2)
				}
				b = utf8.AppendRune(b, r)
			default:
				return nil, p.errf("invalid escape \\%c", e)
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			p.i++
		default:
			r, n := utf8.DecodeRune(p.in[p.i:])
			if r == utf8.RuneError && n <= 1 {
				return nil, p.errf("string is not valid UTF-8")
			}
			b = append(b, p.in[p.i:p.i+n]...)
			p.i += n
		}
	}
}

func (p *parser) hex4() (rune, error) {
	if p.i+4 > len(p.in) {
		return 0, p.errf("short \\u escape")
	}
	v, err := strconv.ParseUint(string(p.in[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, p.errf("invalid \\u escape")
	}
	p.i += 4
	return rune(v), nil
}

func (p *parser) number() error {
	start := p.i
	j := p.i
	for j < len(p.in) {
		c := p.in[j]
		if c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			j++
			continue
		}
		break
	}
	out, err := appendNumber(p.out, p.in[start:j])
	if err != nil {
		return p.errf("%v", err)
	}
	p.out = out
	p.i = j
	return nil
}

func (p *parser) array(depth int) error {
	p.i++ // [
	p.out = append(p.out, '[')
	p.ws()
	if p.i < len(p.in) && p.in[p.i] == ']' {
		p.i++
		p.out = append(p.out, ']')
		return nil
	}
	for {
		if err := p.value(depth + 1); err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.in) {
			return p.errf("unterminated array")
		}
		switch p.in[p.i] {
		case ',':
			p.i++
			p.out = append(p.out, ',')
		case ']':
			p.i++
			p.out = append(p.out, ']')
			return nil
		default:
			return p.errf("expected , or ] in array")
		}
	}
}

// member is one member of an object being parsed: its name and where it was written.
type member struct {
	key string
	span
}

// span is where a member's canonical `"name":value` was written, out[start:end], with the
// deferred objects inside its value, deferred[lo:hi]. int32 keeps a member at 32 bytes: JSON
// takes at most MaxInput (64 MiB) bytes, and the canonical form is at most about 5 times
// longer (1e20 becomes 21 digits).
type span struct {
	start, end int32
	lo, hi     int32
}

// reorderInPlace is the size of an object's canonical text (bytes) up to which an object whose
// members are out of order is reordered in the output at once, by copying. A larger one is
// left in the order read and recorded in deferred, to be written in order once, at the end: a
// copy at every level of nesting would cost the size of the innermost value times the depth
// (a 4 MB string under 9,000 levels of out-of-order objects took 36 s of copying). Below it,
// a byte is copied at most once per enclosing object of at most this size, each of which
// adds at least 12 bytes (two members), so at most reorderInPlace/12 times.
const reorderInPlace = 512

// deferredObject is an object written to out in the order read whose members must be put in
// order: it spans out[start:end], from its '{' to its '}'. Objects are recorded when they
// end, so the objects inside one come before it: deferred[inner:i] for the object at i.
type deferredObject struct {
	start, end int
	inner      int
	members    []span // in order
}

func (p *parser) object(depth int) error {
	p.i++ // {
	p.out = append(p.out, '{')
	p.ws()
	if p.i < len(p.in) && p.in[p.i] == '}' {
		p.i++
		p.out = append(p.out, '}')
		return nil
	}
	open := len(p.out) - 1
	inner := len(p.deferred)
	base := len(p.members) // this object's members are p.members[base:]
	wide := false
	for {
		p.ws()
		if p.i >= len(p.in) || p.in[p.i] != '"' {
			return p.errf("expected a member name")
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.in) || p.in[p.i] != ':' {
			return p.errf("expected : after a member name")
		}
		p.i++
		if len(p.members) > base {
			p.out = append(p.out, ',')
		}
		m := member{key: key, span: span{start: int32(len(p.out)), lo: int32(len(p.deferred))}}
		p.out = AppendString(p.out, key)
		p.out = append(p.out, ':')
		if err := p.value(depth + 1); err != nil {
			return err
		}
		m.end, m.hi = int32(len(p.out)), int32(len(p.deferred))
		for k := 0; k < len(key); k++ {
			if key[k] >= 0xF0 { // a rune above U+FFFF: UTF-16 order differs from byte order
				wide = true
				break
			}
		}
		p.push(m)
		p.ws()
		if p.i >= len(p.in) {
			return p.errf("unterminated object")
		}
		if p.in[p.i] == ',' {
			p.i++
			continue
		}
		if p.in[p.i] != '}' {
			return p.errf("expected , or } in object")
		}
		p.i++
		break
	}
	p.out = append(p.out, '}')
	ms := p.members[base:]
	p.members = p.members[:base] // ms stays valid: nothing is pushed before it is done with
	// RFC 8785 orders members by the UTF-16 code units of their names; UTF-8 byte order
	// agrees unless a name has a rune above U+FFFF.
	order := func(a, b member) int { return strings.Compare(a.key, b.key) }
	if wide {
		order = func(a, b member) int { return compareUTF16(a.key, b.key) }
	}
	inOrder := slices.IsSortedFunc(ms, order) // one member, or names written in order
	if !inOrder {
		slices.SortStableFunc(ms, order)
	}
	for k := 1; k < len(ms); k++ {
		if ms[k-1].key == ms[k].key {
			return &DuplicateKeyError{Key: ms[k].key}
		}
	}
	if inOrder {
		return nil // written as it must be
	}
	if len(p.out)-open > p.inPlace {
		spans := make([]span, len(ms))
		for k, m := range ms {
			spans[k] = m.span
		}
		p.deferred = append(p.deferred, deferredObject{start: open, end: len(p.out), inner: inner, members: spans})
		return nil
	}
	// Small, and so holding no deferred object (each is larger): reorder it here.
	read := append(p.scratch[:0], p.out[open+1:]...)
	p.scratch = read
	p.moved += len(read)
	p.out = p.out[:open+1]
	for k, m := range ms {
		if k > 0 {
			p.out = append(p.out, ',')
		}
		p.out = append(p.out, read[int(m.start)-open-1:int(m.end)-open-1]...)
	}
	p.out = append(p.out, '}')
	return nil
}

// compareUTF16 orders two valid UTF-8 strings by their UTF-16 code units, as RFC 8785 orders
// member names, without encoding them: runes compare as themselves, except that a rune above
// U+FFFF (two code units, the first a surrogate from U+D800) sorts below the runes from
// U+E000 to U+FFFF. Valid UTF-8 holds no surrogates, so the first code units decide unless
// both runes are above U+FFFF, and then the runes' own order is their code units'.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			if ua, ub := firstUnit(ra), firstUnit(rb); ua != ub {
				return cmp.Compare(ua, ub)
			}
			return cmp.Compare(ra, rb)
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r > 0xFFFF {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}

// push appends m to p.members, doubling its capacity when full.
func (p *parser) push(m member) {
	if len(p.members) == cap(p.members) {
		grown := make([]member, len(p.members), max(8, 2*cap(p.members)))
		copy(grown, p.members)
		p.members = grown
	}
	p.members = append(p.members, m)
}

// reorder writes out[start:end] to dst with the deferred objects inside it, deferred[lo:hi],
// in their members' order: every byte of out is copied once, whatever the nesting.
func (p *parser) reorder(dst []byte, start, end, lo, hi int) []byte {
	// The outermost deferred objects in [start, end), last first: the last one recorded is
	// outermost, and the one before its inner objects is the previous outermost.
	var tops []int
	for k := hi - 1; k >= lo; k = p.deferred[k].inner - 1 {
		tops = append(tops, k)
	}
	at := start
	for t := len(tops) - 1; t >= 0; t-- {
		o := &p.deferred[tops[t]]
		dst = append(dst, p.out[at:o.start]...)
		dst = append(dst, '{')
		for k, m := range o.members {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = p.reorder(dst, int(m.start), int(m.end), int(m.lo), int(m.hi))
		}
		dst = append(dst, '}')
		at = o.end
	}
	return append(dst, p.out[at:end]...)
}

// DuplicateKeyError reports an object with two members of one name. Servers disagree on
// which one counts (the first, the last, an error), so a fence cannot know which call it is.
type DuplicateKeyError struct{ Key string }

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("duplicate member name %q in an object", e.Key)
}

// ErrDuplicateKey matches every DuplicateKeyError with errors.Is.
var ErrDuplicateKey = errors.New("duplicate member name")

// Is makes errors.Is(err, ErrDuplicateKey) true.
func (e *DuplicateKeyError) Is(target error) bool { return target == ErrDuplicateKey }

// appendNumber appends the canonical form of one JSON number token (see formatNumber).
func appendNumber(b, tok []byte) ([]byte, error) {
	if plainInteger(tok) {
		return append(b, tok...), nil // already in canonical form
	}
	neg, digits, exp, err := decimal(tok)
	if err != nil {
		return nil, err
	}
	return formatNumber(b, neg, digits, exp), nil
}

// plainInteger reports whether tok is an integer that is its own canonical form: no sign but
// '-', no leading zero, not -0, at most 21 digits (longer ones take the exponent layout).
func plainInteger(tok []byte) bool {
	d := tok
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 21 || d[0] == '0' && (len(d) > 1 || len(tok) > 1) {
		return false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// decimal reads a JSON number token as sign × digits × 10^exp, with digits free of leading
// and trailing zeros ("" for zero). It checks the JSON grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func decimal(tok []byte) (neg bool, digits []byte, exp int64, err error) {
	bad := func() (bool, []byte, int64, error) {
		return false, nil, 0, fmt.Errorf("invalid number %q", clip(tok))
	}
	i := 0
	if i < len(tok) && tok[i] == '-' {
		neg = true
		i++
	}
	intStart := i
	switch {
	case i < len(tok) && tok[i] == '0':
		i++
	case i < len(tok) && tok[i] >= '1' && tok[i] <= '9':
		for i < len(tok) && tok[i] >= '0' && tok[i] <= '9' {
			i++
		}
	default:
		return bad()
	}
	intPart := tok[intStart:i]
	var frac []byte
	if i < len(tok) && tok[i] == '.' {
		i++
		d := i
		for i < len(tok) && tok[i] >= '0' && tok[i] <= '9' {
			i++
		}
		if i == d {
			return bad()
		}
		frac = tok[d:i]
	}
	if i < len(tok) && (tok[i] == 'e' || tok[i] == 'E') {
		i++
		eneg := false
		if i < len(tok) && (tok[i] == '+' || tok[i] == '-') {
			eneg = tok[i] == '-'
			i++
		}
		d := i
		for i < len(tok) && tok[i] >= '0' && tok[i] <= '9' {
			// Past 10^15 the exponent stops growing: no token has the digits to bring its
			// value back within ±maxExponent, but zero, whatever its exponent, which is
			// taken as a server takes it (before 2026-12-06 0e99999999999 was refused).
			if exp < 1e15 {
				exp = exp*10 + int64(tok[i]-'0')
			}
			i++
		}
		if i == d {
			return bad()
		}
		if eneg {
			exp = -exp
		}
	}
	if i != len(tok) {
		return bad()
	}
	// value = (intPart frac) × 10^(exp - len(frac))
	all := make([]byte, 0, len(intPart)+len(frac))
	all = append(all, intPart...)
	all = append(all, frac...)
	exp -= int64(len(frac))
	lead := 0
	for lead < len(all) && all[lead] == '0' {
		lead++
	}
	all = all[lead:]
	trail := len(all)
	for trail > 0 && all[trail-1] == '0' {
		trail--
	}
	exp += int64(len(all) - trail)
	all = all[:trail]
	if len(all) == 0 {
		return false, nil, 0, nil // zero, whatever its sign or exponent
	}
	if exp > maxExponent || exp < -maxExponent {
		return false, nil, 0, fmt.Errorf("number %q: exponent beyond ±%d", clip(tok), maxExponent)
	}
	return neg, all, exp, nil
}

// formatNumber writes the value sign × digits × 10^exp in the layout of ECMAScript's
// Number.prototype.toString (the layout RFC 8785 prescribes), applied to the value's exact
// decimal digits instead of those of the nearest IEEE double. For every number that is the
// shortest round-trip spelling of a double (what JSON encoders write) this is exactly the
// RFC 8785 form; other numbers keep every digit, so distinct values never share a form.
func formatNumber(b []byte, neg bool, digits []byte, exp int64) []byte {
	if len(digits) == 0 {
		return append(b, '0')
	}
	if neg {
		b = append(b, '-')
	}
	k := int64(len(digits))
	n := k + exp // value = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		for z := k; z < n; z++ {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for z := n; z < 0; z++ {
			b = append(b, '0')
		}
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, n-1, 10)
	}
	return b
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}
