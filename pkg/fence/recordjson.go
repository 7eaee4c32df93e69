package fence

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/effectfence/effectfence/pkg/canon"
)

// EncodeRecord is the JSON a store keeps for rec: encoding/json's, except that the raw JSON
// values inside it (the canonical args, and a cert's args and readable result) are kept as
// they are. json.Marshal rewrites <, >, & and U+2028/U+2029 inside raw values as \u escapes,
// so a store that used it gave back other bytes than it was given, and a cert committed from
// such a claim was hashed over args that were no longer canonical: it did not verify, and its
// hash differed from the same call's on the memory store. json.Unmarshal reads both forms.
//
// The bytes are those of encoding/json (an Encoder with SetEscapeHTML(false), without the
// newline), written by appendRecord without reflection, with one member left out: a cert's
// result_bytes (the exact result, base64) when its result already holds those very bytes:
// readable (JSON, valid UTF-8, not nested too deep) and compact, as tools' results almost
// always are. Decoding gives the same record
// either way (Cert.UnmarshalJSON takes result when there is no result_bytes, and builds
// that predate this form read it the same way), and the result is stored once instead of
// 2.33 times. A record appendRecord cannot write exactly (raw JSON that is invalid or not
// compact, a time encoding/json refuses) goes through encoding/json itself, result_bytes
// and all. FuzzEncodeRecord checks the two against each other, and that both decode alike.
//
// Only stores keep this form. A cert shown or exported (Cert.MarshalJSON) always carries
// result_bytes, as docs/CERTS.md describes.
func EncodeRecord(rec *Record) ([]byte, error) {
	if b, ok := appendRecord(make([]byte, 0, recordSizeHint(rec)), rec); ok {
		return b, nil
	}
	return marshalRaw(rec)
}

// recordSizeHint is about the size of rec's encoding, so that appendRecord allocates once.
func recordSizeHint(rec *Record) int {
	n := 512 + len(rec.Args) + len(rec.ExactArgs)*4/3 + len(rec.Reason) + len(rec.Owner)
	if c := rec.Cert; c != nil {
		n += 512 + len(c.Args) + len(c.Result)*7/3
	}
	return n
}

// appendRecord appends the JSON of rec, field by field in the order, with the omissions and
// the spelling of encoding/json. ok is false when it met a value it does not write exactly as
// encoding/json does; b is then garbage.
func appendRecord(b []byte, r *Record) (_ []byte, ok bool) {
	b = append(b, `{"intent":`...)
	b = appendJSONString(b, r.Intent)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(r.State))
	b = append(b, `,"fingerprint":`...)
	b = appendJSONString(b, r.Fingerprint)
	b = append(b, `,"token":`...)
	b = strconv.AppendUint(b, r.Token, 10)
	b = appendOptString(b, `,"nonce":`, r.Nonce)
	b = appendOptString(b, `,"owner":`, r.Owner)
	b = appendOptString(b, `,"agent":`, r.Agent)
	b = appendOptString(b, `,"parent":`, r.Parent)
	b = appendOptString(b, `,"domain":`, r.Domain)
	if r.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, r.Seq, 10)
	}
	b = append(b, `,"tool":`...)
	b = appendJSONString(b, r.Tool)
	b = append(b, `,"args":`...)
	if b, ok = appendRawJSON(b, r.Args); !ok {
		return b, false
	}
	if len(r.ExactArgs) > 0 {
		b = append(b, `,"exact_args":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.ExactArgs)
		b = append(b, '"')
	}
	if len(r.ReadSet) > 0 {
		b = append(b, `,"read_set":`...)
		b = appendReadSet(b, r.ReadSet)
	}
	if len(r.Clock) > 0 {
		b = append(b, `,"vector_clock":`...)
		b = r.Clock.appendCanonicalOf(b, r.Agent) // VectorClock.MarshalJSON
	}
	// time.Time is a struct, which omitempty never omits: expires_at is always written.
	for _, f := range [...]struct {
		key string
		t   *time.Time
	}{{`,"claimed_at":`, &r.ClaimedAt}, {`,"lease_until":`, &r.LeaseUntil}, {`,"updated_at":`, &r.UpdatedAt}, {`,"expires_at":`, &r.ExpiresAt}} {
		b = append(b, f.key...)
		if b, ok = appendTime(b, *f.t); !ok {
			return b, false
		}
	}
	b = appendOptString(b, `,"reason":`, r.Reason)
	if r.Cert != nil {
		b = append(b, `,"cert":`...)
		if b, ok = appendCert(b, r.Cert, r.Args); !ok {
			return b, false
		}
	}
	if r.RerunSafe {
		b = append(b, `,"rerun_safe":true`...)
	}
	b = appendOptString(b, `,"keep_result":`, string(r.KeepResult))
	if len(r.Redacted) > 0 {
		b = append(b, `,"redacted":[`...)
		for i, p := range r.Redacted {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, p)
		}
		b = append(b, ']')
	}
	return append(b, '}'), true
}

// appendCert appends what Cert.MarshalJSON writes (which encoding/json then compacts, leaving
// it as it is), but for a result_bytes that repeats result (see EncodeRecord). written is raw
// JSON appendRecord has just written: cert args that are the very same bytes (the engine
// shares the slice) are not checked again.
func appendCert(b []byte, c *Cert, written json.RawMessage) (_ []byte, ok bool) {
	result, exact, valid := c.Result, []byte(nil), false
	if c.ResultSHA256 != "" {
		exact = c.Result
		if valid = readable(c.Result); !valid {
			result = nil
		}
	}
	if len(result) == 0 {
		result, valid = json.RawMessage("null"), true
	}
	b = append(b, `{"intent":`...)
	b = appendJSONString(b, c.Intent)
	b = append(b, `,"parent":`...)
	b = appendJSONString(b, c.Parent)
	b = append(b, `,"domain":`...)
	b = appendJSONString(b, c.Domain)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, c.Seq, 10)
	b = append(b, `,"tool":`...)
	b = appendJSONString(b, c.Tool)
	b = append(b, `,"args":`...)
	if sameBytes(c.Args, written) {
		b = append(b, c.Args...)
	} else if b, ok = appendRawJSON(b, c.Args); !ok {
		return b, false
	}
	b = append(b, `,"result":`...)
	if valid && spaceless(result) {
		b = append(b, result...)
		if sameBytes(result, exact) {
			// result holds the exact bytes, written as they are, and decoding gives them
			// back as they are (Cert.UnmarshalJSON takes result when there is no
			// result_bytes): their base64 copy would add a third of the result again.
			exact = nil
		}
	} else if b, ok = appendRawJSON(b, result); !ok {
		return b, false
	}
	b = appendOptString(b, `,"result_sha256":`, c.ResultSHA256)
	b = append(b, `,"vector_clock":`...)
	b = c.Clock.appendCanonicalOf(b, c.Agent) // VectorClock.MarshalJSON, which writes {} for nil too
	b = append(b, `,"read_set":`...)
	if c.ReadSet == nil {
		b = append(b, "null"...)
	} else {
		b = appendReadSet(b, c.ReadSet)
	}
	b = append(b, `,"agent":`...)
	b = appendJSONString(b, c.Agent)
	b = append(b, `,"hash":`...)
	b = appendJSONString(b, c.Hash)
	if len(exact) > 0 {
		b = append(b, `,"result_bytes":"`...)
		b = base64.StdEncoding.AppendEncode(b, exact)
		b = append(b, '"')
	}
	return append(b, '}'), true
}

func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, key...), s)
}

func appendReadSet(b []byte, rs []ReadSetEntry) []byte {
	b = append(b, '[')
	for i, e := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"domain":`...)
		b = appendJSONString(b, e.Domain)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, e.Seq, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendTime writes t as time.Time.MarshalJSON does: RFC 3339 with nanoseconds. ok is false
// for the times MarshalJSON refuses, told from the text as it tells them: a year that is not
// four digits (outside 0-9999), a zone offset of 24 hours or more.
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	b = append(b, '"')
	n := len(b)
	b = t.AppendFormat(b, time.RFC3339Nano)
	if len(b)-n < len("2006-01-02T15:04:05Z") || b[n+4] != '-' {
		return b, false
	}
	if b[len(b)-1] != 'Z' {
		zone := b[len(b)-len("Z07:00"):]
		if c := zone[0]; c != '+' && c != '-' || (zone[1]-'0')*10+(zone[2]-'0') >= 24 {
			return b, false
		}
	}
	return append(b, '"'), true
}

// appendRawJSON writes a raw JSON value as encoding/json does (nil is null; anything else is
// compacted, and refused if invalid). ok is false unless raw is valid and already compact,
// the only case it writes: raw as it is.
func appendRawJSON(b []byte, raw json.RawMessage) ([]byte, bool) {
	if raw == nil {
		return append(b, "null"...), true
	}
	if !canon.Valid(raw) || !spaceless(raw) {
		return b, false
	}
	return append(b, raw...), true
}

// sameBytes reports whether a and b are one and the same non-empty slice.
func sameBytes(a, b []byte) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// spaceless reports whether the valid JSON text b has no white space outside its strings, that
// is, whether it is its own compact form.
func spaceless(b []byte) bool {
	if bytes.IndexByte(b, ' ') < 0 && bytes.IndexByte(b, '\n') < 0 && bytes.IndexByte(b, '\t') < 0 && bytes.IndexByte(b, '\r') < 0 {
		return true // vectorised searches: most raw values hold no white space at all
	}
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			return false
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		}
	}
	return true
}

const lowerHex = "0123456789abcdef"

// plainASCII marks the bytes a JSON string holds as they are and that need no UTF-8 decoding:
// ASCII but quotes, backslashes and control characters.
var plainASCII = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\'
	}
	return t
}()

// appendJSONString writes s as encoding/json writes a string without HTML escaping: quotes,
// backslashes and control characters escaped (\b, \f, \n, \r, \t or \u00XX), each byte of
// invalid UTF-8 as \ufffd, U+2028 and U+2029 as \u2028 and \u2029, all else as it is.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if plainASCII[s[i]] {
			i++
			continue
		}
		if c := s[i]; c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', lowerHex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// marshalRaw is json.Marshal without HTML escaping. Its encoders and their buffers are pooled
// (a store encodes a record per write; json.Marshal pools its own state the same way).
func marshalRaw(v any) ([]byte, error) {
	e := rawEncoders.Get().(*rawEncoder)
	defer e.release()
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n"))), nil
}

type rawEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var rawEncoders = sync.Pool{New: func() any {
	e := &rawEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

func (e *rawEncoder) release() {
	if e.buf.Cap() > 64<<10 {
		return // a large record's buffer is not kept
	}
	e.buf.Reset()
	rawEncoders.Put(e)
}

// escapedByOldStores reports whether raw JSON may hold a \u escape that canonical JSON never
// writes (\u003c for <, say): args recorded by a store before EncodeRecord. RFC 8785 writes
// \u only for control characters, so a false positive costs one canonicalisation.
func escapedByOldStores(raw []byte) bool { return bytes.Contains(raw, []byte(`\u`)) }

// EncodeRecordDecoded is EncodeRecord that also returns, when it can tell without decoding,
// the record that decoding the bytes with encoding/json gives back (nil otherwise): a copy of
// rec sharing no memory with it, with the values JSON cannot tell apart spelled as decoding
// spells them (empty slices and clocks nil, null args, times without a monotonic reading,
// an offset of zero in UTC). A store that writes a claim and reads it back moments later (the
// commit of a fresh call) answers from that record instead of decoding what it just encoded.
// It gives one only for a record without a cert, all of whose strings are valid UTF-8 and
// whose times are in UTC or the local zone, and only when its encoding is at most maxTwin
// bytes: the stores keep no larger one, and the twin copies the record's arguments (two
// copies of a 16 MiB argument were made and thrown away). TestEncodeRecordDecoded checks it
// against json.Unmarshal.
func EncodeRecordDecoded(rec *Record, maxTwin int) ([]byte, *Record, error) {
	b, ok := appendRecord(make([]byte, 0, recordSizeHint(rec)), rec)
	if !ok {
		b, err := marshalRaw(rec)
		return b, nil, err
	}
	if len(b) > maxTwin {
		return b, nil, nil
	}
	return b, decodedTwin(rec), nil
}

// decodedTwin is the record json.Unmarshal gives for appendRecord's encoding of r, or nil
// when telling it would take more than copying.
func decodedTwin(r *Record) *Record {
	if r.Cert != nil {
		return nil
	}
	for _, s := range [...]string{r.Intent, string(r.State), r.Fingerprint, r.Nonce, r.Owner, r.Agent, r.Parent, r.Domain, r.Tool, r.Reason, string(r.KeepResult)} {
		if !utf8.ValidString(s) {
			return nil
		}
	}
	d := *r
	var ok bool
	for _, t := range [...]*time.Time{&d.ClaimedAt, &d.LeaseUntil, &d.UpdatedAt, &d.ExpiresAt} {
		if *t, ok = decodedTime(*t); !ok {
			return nil
		}
	}
	if d.Args == nil {
		d.Args = json.RawMessage("null")
	} else {
		d.Args = bytes.Clone(r.Args)
	}
	d.ExactArgs = nil
	if len(r.ExactArgs) > 0 {
		d.ExactArgs = bytes.Clone(r.ExactArgs)
	}
	d.ReadSet = nil
	if len(r.ReadSet) > 0 {
		for _, e := range r.ReadSet {
			if !utf8.ValidString(e.Domain) {
				return nil
			}
		}
		d.ReadSet = append([]ReadSetEntry(nil), r.ReadSet...)
	}
	for k := range r.Clock {
		if !utf8.ValidString(k) {
			return nil
		}
	}
	d.Clock = r.Clock.Normal() // what VectorClock.UnmarshalJSON keeps of the canonical form
	d.Redacted = nil
	if len(r.Redacted) > 0 {
		for _, p := range r.Redacted {
			if !utf8.ValidString(p) {
				return nil
			}
		}
		d.Redacted = append([]string(nil), r.Redacted...)
	}
	return &d
}

// decodedTime is t as time.Time.UnmarshalJSON gives it back from its RFC 3339 form: without a
// monotonic reading, in UTC when its offset is zero ("Z"), in the local zone when t is in it
// (its offset is the local zone's at that instant). ok is false for other zones, whose
// offsets parsing may attribute to the local zone or to a nameless one.
func decodedTime(t time.Time) (time.Time, bool) {
	t = t.Round(0)
	_, off := t.Zone()
	switch {
	case off == 0:
		return t.UTC(), true
	case t.Location() == time.Local && off%60 == 0:
		return t, true
	}
	return t, false
}
