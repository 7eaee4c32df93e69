package fence

import (
	"encoding/base64"
	"unicode/utf8"
)

// decodeFast reads body into w in one pass when body is in the shape a store writes: a JSON
// object whose members are each named exactly as record's tags name them, at most once, with
// values of their fields' types or null, and strings without escapes. It reports false,
// leaving w to be zeroed and handed to encoding/json, for anything else: a member named in
// another case or twice, an unknown member, a string with an escape or with bytes that are
// not UTF-8, a number that is not a plain non-negative integer of 64 bits, a null among a
// read set's entries, invalid JSON. Within that shape encoding/json gives the very record
// this gives (TestDecodeRecordMatchesUnmarshal, FuzzDecodeRecord); outside it, encoding/json
// decides, errors included.
//
// encoding/json reads a record twice (a scan of the whole body for validity, then the decode,
// which skips over each raw value once more) and finds each field by reflection; this reads
// each byte once and allocates only the record's own small fields.
func decodeFast(body []byte, w *record) bool {
	d := fastDecoder{b: body}
	d.ws()
	ok := d.object(func(key []byte) bool { return d.recordMember(key, w) })
	d.ws()
	return ok && d.i == len(d.b)
}

// fastDecoder is a position in a body decodeFast reads.
type fastDecoder struct {
	b []byte
	i int
	// seen holds a bit per member of the object being read, by its place in the switch of
	// recordMember or certMember: a member met twice leaves the body to encoding/json.
	seen uint32
}

// maxFastDepth bounds the nesting decodeFast follows inside a raw value: deeper ones go to
// encoding/json (whose own limit is 10,000).
const maxFastDepth = 512

func (d *fastDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the byte at the position, or 0 at the end.
func (d *fastDecoder) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// seq reads a sequence between open and close (an object's or an array's brackets): item reads
// each element from its position, and the commas between them are read here.
func (d *fastDecoder) seq(open, close byte, item func() bool) bool {
	if d.peek() != open {
		return false
	}
	d.i++
	d.ws()
	if d.peek() == close {
		d.i++
		return true
	}
	for {
		if !item() {
			return false
		}
		d.ws()
		switch d.peek() {
		case ',':
			d.i++
			d.ws()
		case close:
			d.i++
			return true
		default:
			return false
		}
	}
}

// colon reads the colon after a member's name, and the space around it.
func (d *fastDecoder) colon() bool {
	d.ws()
	if d.peek() != ':' {
		return false
	}
	d.i++
	d.ws()
	return true
}

// object reads an object whose members member reads: it is called with each name, the
// position at the member's value, and must leave the position after it.
func (d *fastDecoder) object(member func(key []byte) bool) bool {
	return d.seq('{', '}', func() bool {
		key, ok := d.plainString()
		return ok && d.colon() && member(key)
	})
}

// array reads an array whose elements elem reads (from the position at each).
func (d *fastDecoder) array(elem func() bool) bool { return d.seq('[', ']', elem) }

// once marks member bit k of the object being read as seen, and reports false if it was.
func (d *fastDecoder) once(k uint) bool {
	if d.seen&(1<<k) != 0 {
		return false
	}
	d.seen |= 1 << k
	return true
}

// plainString reads a JSON string that holds no escape, no control character and only UTF-8,
// which is the string itself: it returns its bytes (a piece of the body).
func (d *fastDecoder) plainString() ([]byte, bool) {
	if d.peek() != '"' {
		return nil, false
	}
	start := d.i + 1
	ascii := true
	for j := start; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			d.i = j + 1
			s := d.b[start:j]
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// null reads a null, which encoding/json puts in a string, number, bool, slice or pointer
// by leaving it as it is: here, as it was made (zero).
func (d *fastDecoder) null() bool { return d.lit("null") }

// state reads a state, the ones the engine writes without a copy of their name.
func (d *fastDecoder) state(into *State) bool {
	if d.peek() == 'n' {
		return d.null()
	}
	s, ok := d.plainString()
	for _, known := range [...]State{StateDone, StateInFlight, StateFailed, StateUnknown} {
		if string(s) == string(known) {
			*into = known
			return ok
		}
	}
	*into = State(s)
	return ok
}

// same reads a string, and gives it the bytes of like when it is equal to it: a cert repeats
// its record's intent, tool and agent.
func (d *fastDecoder) same(into *string, like string) bool {
	if d.peek() == 'n' {
		return d.null()
	}
	s, ok := d.plainString()
	if string(s) == like {
		*into = like
	} else {
		*into = string(s)
	}
	return ok
}

func (d *fastDecoder) str(into *string) bool {
	if d.peek() == 'n' {
		return d.null()
	}
	s, ok := d.plainString()
	*into = string(s)
	return ok
}

// uint reads a non-negative integer that fits 64 bits, written as JSON writes one (no sign,
// no leading zero, no fraction or exponent).
func (d *fastDecoder) uint(into *uint64) bool {
	if d.peek() == 'n' {
		return d.null()
	}
	start := d.i
	var n uint64
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		c := uint64(d.b[d.i] - '0')
		if n > (1<<64-1-c)/10 {
			return false // over 64 bits
		}
		n = n*10 + c
		d.i++
	}
	switch {
	case d.i == start, d.b[start] == '0' && d.i-start > 1:
		return false
	case d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E'):
		return false // a number encoding/json would not put in an integer
	}
	*into = n
	return true
}

func (d *fastDecoder) boolean(into *bool) bool {
	switch {
	case d.null():
	case d.lit("true"):
		*into = true
	case d.lit("false"):
		*into = false
	default:
		return false
	}
	return true
}

// lit reads the literal word.
func (d *fastDecoder) lit(word string) bool {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return false
	}
	d.i += len(word)
	return true
}

// raw reads any JSON value and returns its bytes, as encoding/json hands them to an
// Unmarshaler: a piece of the body.
func (d *fastDecoder) raw(into *rawPiece) bool {
	start := d.i
	if !d.skip(0) {
		return false
	}
	*into = d.b[start:d.i:d.i]
	return true
}

// skip reads any JSON value, checking it is valid.
func (d *fastDecoder) skip(depth int) bool {
	if depth > maxFastDepth {
		return false
	}
	switch c := d.peek(); {
	case c == '{':
		return d.seq('{', '}', func() bool { return d.peek() == '"' && d.skipString() && d.colon() && d.skip(depth+1) })
	case c == '[':
		return d.seq('[', ']', func() bool { return d.skip(depth + 1) })
	case c == '"':
		return d.skipString()
	case c == '-' || '0' <= c && c <= '9':
		return d.skipNumber()
	case c == 't':
		return d.lit("true")
	case c == 'f':
		return d.lit("false")
	case c == 'n':
		return d.lit("null")
	}
	return false
}

// skipString reads a JSON string, escapes included (their bytes are not checked for UTF-8,
// as encoding/json does not check them in a raw value).
func (d *fastDecoder) skipString() bool {
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			d.i = j + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			j++
			if j >= len(d.b) {
				return false
			}
			switch d.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(d.b) {
					return false
				}
				for _, h := range d.b[j+1 : j+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				j += 4
			default:
				return false
			}
		}
	}
	return false
}

// skipNumber reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *fastDecoder) skipNumber() bool {
	if d.peek() == '-' {
		d.i++
	}
	switch c := d.peek(); {
	case c == '0':
		d.i++
	case '1' <= c && c <= '9':
		d.digits()
	default:
		return false
	}
	if d.peek() == '.' {
		d.i++
		if !d.digits() {
			return false
		}
	}
	if c := d.peek(); c == 'e' || c == 'E' {
		d.i++
		if c := d.peek(); c == '+' || c == '-' {
			d.i++
		}
		if !d.digits() {
			return false
		}
	}
	return true
}

// digits reads one digit or more.
func (d *fastDecoder) digits() bool {
	start := d.i
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}

// base64 reads a string of base64, as encoding/json decodes one into a []byte.
func (d *fastDecoder) base64(into *[]byte) bool {
	if d.peek() == 'n' {
		return d.null()
	}
	s, ok := d.plainString()
	if !ok {
		return false
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(b, s)
	*into = b[:n]
	return err == nil
}

// timeValue reads a time as encoding/json does: the string, quotes included, or null to
// time.Time.UnmarshalJSON.
func (d *fastDecoder) timeValue(into interface{ UnmarshalJSON([]byte) error }) bool {
	start := d.i
	if d.peek() == 'n' {
		if !d.null() {
			return false
		}
	} else if _, ok := d.plainString(); !ok {
		return false
	}
	return into.UnmarshalJSON(d.b[start:d.i]) == nil
}

// clockEntry is a counter of a clock being read.
type clockEntry struct {
	agent []byte
	n     uint64
}

// maxFastClock is the most counters a clock decodeFast reads may hold: a record's clock
// names the agents that decided before it, usually one or two.
const maxFastClock = 16

// clock reads a vector clock: an object of counters, as VectorClock.UnmarshalJSON reads one
// (VectorClock.Normal of what encoding/json gives: no zero counter, nil when none is left).
func (d *fastDecoder) clock(into *VectorClock) bool {
	if d.peek() == 'n' { // encoding/json hands the null to VectorClock.UnmarshalJSON
		return d.null() && into.UnmarshalJSON([]byte("null")) == nil
	}
	var entries [maxFastClock]clockEntry
	k, nonzero := 0, 0
	ok := d.object(func(key []byte) bool {
		if k == len(entries) {
			return false
		}
		for _, e := range entries[:k] {
			if string(e.agent) == string(key) {
				return false // the last one counts in encoding/json: left to it
			}
		}
		if !d.uint(&entries[k].n) {
			return false
		}
		entries[k].agent = key
		if entries[k].n != 0 {
			nonzero++
		}
		k++
		return true
	})
	if !ok {
		return false
	}
	*into = nil
	if nonzero > 0 {
		v := make(VectorClock, nonzero)
		for _, e := range entries[:k] {
			if e.n != 0 {
				v[string(e.agent)] = e.n
			}
		}
		*into = v
	}
	return true
}

// list reads an array into a new slice, each element read by elem, or null (leaving into as
// it is, as encoding/json does).
func list[T any](d *fastDecoder, into *[]T, elem func() (T, bool)) bool {
	if d.peek() == 'n' {
		return d.null()
	}
	out := []T{}
	ok := d.array(func() bool {
		v, ok := elem()
		out = append(out, v)
		return ok
	})
	*into = out
	return ok
}

// nested reads an object within the one being read (a cert, a read set's entry), whose
// members once counts apart.
func (d *fastDecoder) nested(member func(key []byte) bool) bool {
	outer := d.seen
	d.seen = 0
	ok := d.object(member)
	d.seen = outer
	return ok
}

// readSet reads a read set: an array of objects with a domain and a seq.
func (d *fastDecoder) readSet(into *[]ReadSetEntry) bool {
	return list(d, into, func() (e ReadSetEntry, ok bool) {
		ok = d.nested(func(key []byte) bool {
			switch string(key) {
			case "domain":
				return d.once(0) && d.str(&e.Domain)
			case "seq":
				return d.once(1) && d.uint(&e.Seq)
			}
			return false
		})
		return e, ok
	})
}

func (d *fastDecoder) recordMember(key []byte, w *record) bool {
	switch string(key) {
	case "intent":
		return d.once(0) && d.str(&w.Intent)
	case "state":
		return d.once(1) && d.state(&w.State)
	case "fingerprint":
		return d.once(2) && d.str(&w.Fingerprint)
	case "token":
		return d.once(3) && d.uint(&w.Token)
	case "nonce":
		return d.once(4) && d.str(&w.Nonce)
	case "owner":
		return d.once(5) && d.str(&w.Owner)
	case "agent":
		return d.once(6) && d.str(&w.Agent)
	case "parent":
		return d.once(7) && d.str(&w.Parent)
	case "domain":
		return d.once(8) && d.str(&w.Domain)
	case "seq":
		return d.once(9) && d.uint(&w.Seq)
	case "tool":
		return d.once(10) && d.str(&w.Tool)
	case "args":
		return d.once(11) && d.raw(&w.Args)
	case "exact_args":
		return d.once(12) && d.base64(&w.ExactArgs)
	case "read_set":
		return d.once(13) && d.readSet(&w.ReadSet)
	case "vector_clock":
		return d.once(14) && d.clock(&w.Clock)
	case "claimed_at":
		return d.once(15) && d.timeValue(&w.ClaimedAt)
	case "lease_until":
		return d.once(16) && d.timeValue(&w.LeaseUntil)
	case "updated_at":
		return d.once(17) && d.timeValue(&w.UpdatedAt)
	case "expires_at":
		return d.once(18) && d.timeValue(&w.ExpiresAt)
	case "reason":
		return d.once(19) && d.str(&w.Reason)
	case "cert":
		if !d.once(20) {
			return false
		}
		if d.peek() == 'n' {
			return d.null()
		}
		w.Cert = new(storedCert)
		return d.nested(func(key []byte) bool { return d.certMember(key, w.Cert, w) })
	case "rerun_safe":
		return d.once(21) && d.boolean(&w.RerunSafe)
	case "keep_result":
		return d.once(22) && d.str((*string)(&w.KeepResult))
	case "redacted":
		return d.once(23) && list(d, &w.Redacted, func() (s string, ok bool) {
			ok = d.str(&s) // before s is read: a return's operands have no set order
			return s, ok
		})
	}
	return false
}

func (d *fastDecoder) certMember(key []byte, c *storedCert, w *record) bool {
	switch string(key) {
	case "intent":
		return d.once(0) && d.same(&c.Intent, w.Intent)
	case "parent":
		return d.once(1) && d.str(&c.Parent)
	case "domain":
		return d.once(2) && d.str(&c.Domain)
	case "seq":
		return d.once(3) && d.uint(&c.Seq)
	case "tool":
		return d.once(4) && d.same(&c.Tool, w.Tool)
	case "args":
		return d.once(5) && d.raw(&c.Args)
	case "result":
		return d.once(6) && d.raw(&c.Result)
	case "result_sha256":
		return d.once(7) && d.str(&c.ResultSHA256)
	case "vector_clock":
		return d.once(8) && d.clock(&c.Clock)
	case "read_set":
		return d.once(9) && d.readSet(&c.ReadSet)
	case "agent":
		return d.once(10) && d.same(&c.Agent, w.Agent)
	case "hash":
		return d.once(11) && d.str(&c.Hash)
	case "result_bytes":
		return d.once(12) && d.base64(&c.ResultBytes)
	}
	return false
}
