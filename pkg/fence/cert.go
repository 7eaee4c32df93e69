package fence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// Cert (EffectCert) records one executed effect.
//
// Result is the tool's result exactly as it was committed, byte for byte (a result that no
// canonicaliser accepts, with a lone surrogate or a duplicate member, is recorded and replayed
// as it came). ResultSHA256 is the lowercase hex SHA-256 of those bytes. Hash is the lowercase
// hex SHA-256 of the canonical JSON (package canon) of the object made of every other field,
// all ten always present, with result_sha256 standing in for result. In JSON, a cert carries
// the exact bytes in result_bytes (base64) beside a readable result.
//
// Certs recorded before ResultSHA256 existed have none; their hash covers the canonical form
// of result itself, and Verify checks them that way. docs/CERTS.md gives both recipes and
// test vectors.
type Cert struct {
	Intent       string          `json:"intent"`
	Parent       string          `json:"parent"`
	Domain       string          `json:"domain"`
	Seq          uint64          `json:"seq"`
	Tool         string          `json:"tool"`
	Args         json.RawMessage `json:"args"`
	Result       json.RawMessage `json:"result"`
	ResultSHA256 string          `json:"result_sha256,omitempty"`
	Clock        VectorClock     `json:"vector_clock"`
	ReadSet      []ReadSetEntry  `json:"read_set"`
	Agent        string          `json:"agent"`
	Hash         string          `json:"hash"`
}

// copy returns a new Cert equal to c (the caller's own copy of a cert just recorded). It is
// written as a literal, field by field, as the object is made; see doneRecord for why.
// TestDoneRecordCopiesEveryField checks that every field is copied.
func (c *Cert) copy() *Cert {
	return &Cert{
		Intent: c.Intent, Parent: c.Parent, Domain: c.Domain, Seq: c.Seq, Tool: c.Tool, Args: c.Args,
		Result: c.Result, ResultSHA256: c.ResultSHA256, Clock: c.Clock, ReadSet: c.ReadSet,
		Agent: c.Agent, Hash: c.Hash,
	}
}

// certJSON is Cert without its methods, for the JSON form.
type certJSON Cert

// MarshalJSON writes the cert with its result twice: readable in result (encoding/json may
// respace or re-escape it) and exact in result_bytes. A result that is not JSON, or is nested
// too deeply to be read back inside a cert (see readable), is null in result.
func (c Cert) MarshalJSON() ([]byte, error) {
	w := struct {
		certJSON
		ResultBytes []byte `json:"result_bytes,omitempty"`
	}{certJSON: certJSON(c)}
	if c.ResultSHA256 != "" {
		w.ResultBytes = c.Result
		if !readable(c.Result) {
			w.Result = nil
		}
	}
	if len(w.Result) == 0 {
		w.Result = json.RawMessage("null")
	}
	// Without HTML escaping, args and result are written as they are (see EncodeRecord). A
	// caller that marshals the cert with json.Marshal escapes them again; stores do not.
	return marshalRaw(w)
}

// UnmarshalJSON reads what MarshalJSON wrote, and a store's form of it (EncodeRecord), which
// leaves out result_bytes when result holds the exact bytes: Result gets result_bytes when
// present, and result as it is otherwise.
//
// It refuses JSON that docs/CERTS.md's recipe does not verify although its hash was left as
// it was: a member that is not a cert's, one named in another case, one given twice
// (checkCertMembers), and a readable result that is not result_bytes' value. encoding/json
// alone took "INTENT" for intent and kept the last of two members, so a cert showing intent
// "charge:B" beside the hashed "INTENT":"charge:A" decoded as the cert of charge:A and
// verified; and, as Result comes from result_bytes, an edited readable result verified too
// (TestCertJSONEditedAroundItsHashDoesNotVerify).
func (c *Cert) UnmarshalJSON(b []byte) error {
	var w struct {
		certJSON
		ResultBytes []byte `json:"result_bytes"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if err := checkCertMembers(b); err != nil {
		return err
	}
	if w.ResultBytes != nil && len(w.Result) > 0 && string(w.Result) != "null" && !sameJSON(w.Result, w.ResultBytes) {
		return fmt.Errorf("cert of intent %q: its readable result %.300s %w", w.Intent, w.Result, errReadableDiffers)
	}
	*c = Cert(w.certJSON)
	if w.ResultBytes != nil {
		c.Result = w.ResultBytes
	}
	return nil
}

// canonicalNumbers replaces every json.Number in the decoded value *v by its canonical form
// (1.0 and 1e0 are 1), reporting false for a number package canon refuses.
func canonicalNumbers(v *any) bool {
	switch x := (*v).(type) {
	case json.Number:
		c, err := canon.JSON([]byte(x))
		*v = json.Number(c)
		return err == nil
	case map[string]any:
		for k, e := range x {
			if !canonicalNumbers(&e) {
				return false
			}
			x[k] = e
		}
	case []any:
		for i := range x {
			if !canonicalNumbers(&x[i]) {
				return false
			}
		}
	}
	return true
}

// errReadableDiffers is Cert.UnmarshalJSON's refusal of a readable result that is not
// result_bytes' value.
var errReadableDiffers = errors.New("is not the value of result_bytes, the result its hash covers (docs/CERTS.md, step 2a)")

// certMember lists the members of a cert's JSON: the ten its hash covers, result and
// result_sha256 (one of them is among the ten), and result_bytes.
var certMember = map[string]bool{
	"intent": true, "parent": true, "domain": true, "seq": true, "tool": true, "args": true,
	"result": true, "result_sha256": true, "vector_clock": true, "read_set": true, "agent": true,
	"hash": true, "result_bytes": true,
}

// checkCertMembers refuses the JSON b of a cert (valid JSON) if a member is not one of
// certMember, exactly as named there, or if one is given twice, in the cert or in its vector
// clock or a read set entry, or if a read set entry has a member but domain and seq. The recipe hashes every member
// but hash and the result's two copies, as named: one it does not know of, or one named in
// another case, changes the hash, and of a member given twice readers keep either the first or
// the last. encoding/json matches names in any case and keeps the last.
func checkCertMembers(b []byte) error {
	if i := jsonrpc.SkipSpace(b, 0); i == len(b) || b[i] != '{' {
		return nil // null: nothing decoded
	}
	var seen [16]string
	n := 0
	for m := range jsonrpc.Members(b) {
		name := jsonrpc.Unquote(b[m.Key:m.KeyEnd])
		if !certMember[name] {
			return fmt.Errorf("cert member %.100q is not one of a cert's (docs/CERTS.md; names are case-sensitive): its hash does not cover it", name)
		}
		for _, s := range seen[:n] {
			if s == name {
				return fmt.Errorf("cert member %q is given twice: readers disagree on which one the cert holds", name)
			}
		}
		if name == "vector_clock" || name == "read_set" {
			// Nor within these, which encoding/json reads keeping the last (args with a member
			// twice have no canonical form: Verify refuses them; a result may have one).
			if _, err := canon.JSON(b[m.Start:m.End]); errors.Is(err, canon.ErrDuplicateKey) {
				return fmt.Errorf("cert member %q: %w: readers disagree on which one the cert holds", name, err)
			}
		}
		if name == "read_set" {
			// A read set entry holds domain and seq, as named: encoding/json took "SEQ" for seq
			// and skipped a member of another name, which the hash does not cover.
			var entries []map[string]json.RawMessage
			if json.Unmarshal(b[m.Start:m.End], &entries) == nil {
				for _, e := range entries {
					for k := range e {
						if k != "domain" && k != "seq" {
							return fmt.Errorf("cert member read_set: an entry's member %.100q is not domain or seq (names are case-sensitive): its hash does not cover it", k)
						}
					}
				}
			}
		}
		if n < len(seen) {
			seen[n] = name
			n++
		}
	}
	return nil
}

// sameJSON reports whether the JSON texts a and b are one value: their canonical forms are
// equal, or, for text without one (a member given twice, a lone surrogate), they decode to
// the same value as encoding/json reads them (the last of two members), numbers compared by
// their canonical form, as docs/CERTS.md's verifier compares them.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	ca, aerr := canon.JSON(a)
	cb, berr := canon.JSON(b)
	if aerr == nil && berr == nil {
		return bytes.Equal(ca, cb)
	}
	decode := func(b []byte) (any, bool) {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if d.Decode(&v) != nil {
			return nil, false
		}
		// Nothing but white space after the value: d.More is false before a stray } or ], so
		// it took {"a":1}} for the value {"a":1}.
		var rest any
		if d.Decode(&rest) != io.EOF {
			return nil, false
		}
		return v, canonicalNumbers(&v)
	}
	va, aok := decode(a)
	vb, bok := decode(b)
	// encoding/json reads every lone surrogate escape as U+FFFD: "\ud830" for "\ud83d" read
	// alike. The escapes of surrogates are compared as written, in order.
	return aok && bok && reflect.DeepEqual(va, vb) && slices.Equal(surrogateEscapes(a), surrogateEscapes(b))
}

// surrogateEscapes lists the \u escapes of the JSON text b that stand for a UTF-16 surrogate
// (D800 to DFFF), in order, lowercased.
func surrogateEscapes(b []byte) []string {
	var out []string
	for i := 0; i+1 < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			if e := strings.ToLower(string(b[i+2 : i+6])); e >= "d800" && e <= "dfff" {
				out = append(out, e)
			}
		}
		i++ // the escaped character: a backslash escaped is no escape's start
	}
	return out
}

// ComputeHash returns the hash the cert should carry, from every field but Hash.
func (c *Cert) ComputeHash() (string, error) {
	b, err := c.canonicalBody(false)
	if err != nil {
		return "", fmt.Errorf("cert of intent %q: %w", c.Intent, err)
	}
	return canon.Sum(b), nil
}

// maxExactSeq is the largest integer RFC 8785 prints as plain digits (IEEE double precision).
const maxExactSeq = 1 << 53

// canonicalBody assembles the canonical form of the cert without its hash. The members are
// written in canonical order (agent, args, domain, intent, parent, read_set, result or
// result_sha256, seq, tool, vector_clock); args (and result, for a cert without
// result_sha256) are canonicalised by package canon; strings and integers are written as
// RFC 8785 writes them. TestCertCanonicalMatchesLibrary and FuzzCertCanonical check it byte
// for byte against the canonicalisation of the naive JSON.
//
// argsAsStored keeps args exactly as the cert holds them instead of canonicalising them:
// the body an earlier build hashed for args a store had re-escaped (storedArgsHash). The
// engine builds new certs' bodies with appendCanonicalBody, from args it canonicalised itself.
func (c *Cert) canonicalBody(argsAsStored bool) ([]byte, error) {
	args, result := orNull(c.Args), orNull(c.Result)
	var err error
	if !argsAsStored {
		if args, err = canon.JSON(args); err != nil {
			return nil, fmt.Errorf("args: %w", err)
		}
	}
	if c.ResultSHA256 != "" {
		result = nil // the digest stands for the result; appended below
	} else if result, err = canon.JSON(result); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return c.appendCanonicalBody(make([]byte, 0, c.bodySizeHint(args, result)), args, result, nil)
}

// bodySizeHint is about the length of the canonical body (exact for plain ASCII strings).
func (c *Cert) bodySizeHint(args, result []byte) int {
	n := 160 + len(args) + len(result) + len(c.ResultSHA256) + len(c.Intent) + len(c.Tool) + len(c.Parent) + len(c.Domain) + len(c.Agent) + 32*len(c.ReadSet)
	for k := range c.Clock {
		n += len(k) + 24
	}
	return n
}

// appendCanonicalBody appends the canonical body to b (args and result already canonical, or
// trusted to be). A digest, when given, is the result's (Sum's hex digits) and stands in for
// c.ResultSHA256, which the engine sets only once the hash is known too.
func (c *Cert) appendCanonicalBody(b []byte, args, result []byte, digest *[canon.SumLen]byte) ([]byte, error) {
	if c.Seq > maxExactSeq {
		return nil, fmt.Errorf("seq %d exceeds 2^53", c.Seq)
	}
	b = append(b, `{"agent":`...)
	b = canon.AppendString(b, c.Agent)
	b = append(b, `,"args":`...)
	b = append(b, args...)
	b = append(b, `,"domain":`...)
	b = canon.AppendString(b, c.Domain)
	b = append(b, `,"intent":`...)
	b = canon.AppendString(b, c.Intent)
	b = append(b, `,"parent":`...)
	b = canon.AppendString(b, c.Parent)
	b = append(b, `,"read_set":[`...)
	for i, r := range c.ReadSet {
		if r.Seq > maxExactSeq {
			return nil, fmt.Errorf("read_set seq %d exceeds 2^53", r.Seq)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"domain":`...)
		b = canon.AppendString(b, r.Domain)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, r.Seq, 10)
		b = append(b, '}')
	}
	switch {
	case digest != nil:
		b = append(b, `],"result_sha256":"`...)
		b = append(b, digest[:]...) // hex digits stand for themselves
		b = append(b, '"')
	case c.ResultSHA256 != "":
		b = append(b, `],"result_sha256":`...)
		b = canon.AppendString(b, c.ResultSHA256)
	default:
		b = append(b, `],"result":`...)
		b = append(b, result...)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, c.Seq, 10)
	b = append(b, `,"tool":`...)
	b = canon.AppendString(b, c.Tool)
	b = append(b, `,"vector_clock":`...)
	b = c.Clock.appendCanonicalOf(b, c.Agent)
	return append(b, '}'), nil
}

// Verify recomputes the hash (and the result's digest) and reports a mismatch (a tampered or
// corrupted cert).
func (c *Cert) Verify() error {
	sum, notKeptObj := c.ResultNotKept()
	switch {
	case notKeptObj && isHexDigest(sum) && bytes.Equal(c.Result, notKept(sum)):
		// Only a digest was kept (KeepHash): the exact bytes are gone by design, and the hash
		// below still binds result_sha256. Only the object the engine writes, byte for byte:
		// read as the digest alone, one with more in it (text a replay would show) verified.
	case c.ResultSHA256 != "":
		got := canon.Sum(c.Result)
		switch {
		case got == c.ResultSHA256:
		case notKeptObj:
			return fmt.Errorf("cert of intent %q does not verify: its result %.300s is not the object of keep-result hash as effectfence writes it ({%q:{\"sha256\":\"<64 lowercase hex digits>\"}}), and hashes to %s, recorded result_sha256 %s",
				c.Intent, c.Result, MetaResultNotKept, got, c.ResultSHA256)
		default:
			return fmt.Errorf("cert of intent %q does not verify: its result hashes to %s, recorded result_sha256 %s", c.Intent, got, c.ResultSHA256)
		}
	}
	h, err := c.ComputeHash()
	if err != nil {
		return err
	}
	if h != c.Hash && !c.hashedOverStoredArgs() {
		return fmt.Errorf("cert of intent %q does not verify: recorded hash %s, content hashes to %s", c.Intent, c.Hash, h)
	}
	return nil
}

// storedArgsHash is the hash of the cert's body with its args exactly as stored, for certs
// whose args a store re-escaped before EncodeRecord (\u003c for <): the engine hashed those
// escaped args as they came back from the store. It binds the same content (changing any of
// it changes this hash too); it is "" for args canonical JSON could have written, and for
// args no store wrote that way: only canonical args with <, >, &, U+2028 and U+2029 escaped as
// encoding/json escapes them (docs/CERTS.md; any other spelling hashed as it is verified, though
// the recipe gives another hash for it).
func (c *Cert) storedArgsHash() string {
	if _, ok := CanonicalOfEscapedArgs(c.Args); !ok {
		return ""
	}
	b, err := c.canonicalBody(true)
	if err != nil {
		return ""
	}
	return canon.Sum(b)
}

// CanonicalOfEscapedArgs returns the canonical form of args as a store of an earlier build
// kept them: canonical JSON with <, >, &, U+2028 and U+2029 escaped as encoding/json escapes
// them (\u003c…). ok is false for any other args, canonical ones and every other spelling.
func CanonicalOfEscapedArgs(args []byte) (canonical []byte, ok bool) {
	if !escapedByOldStores(args) {
		return nil, false
	}
	canonical, err := canon.JSON(args)
	if err != nil {
		return nil, false
	}
	var escaped bytes.Buffer
	json.HTMLEscape(&escaped, canonical)
	return canonical, bytes.Equal(escaped.Bytes(), args)
}

// hashedOverStoredArgs reports whether the cert's hash is storedArgsHash.
func (c *Cert) hashedOverStoredArgs() bool {
	h := c.storedArgsHash()
	return h != "" && h == c.Hash
}

// isHexDigest reports whether s is a lowercase hex SHA-256, as canon.Sum writes it.
func isHexDigest(s string) bool {
	if len(s) != canon.SumLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// MaxNesting bounds how deeply a call's arguments, and a cert's readable result, nest arrays
// and objects: 64 levels under encoding/json's limit of 10,000 (canon.MaxDepth), room for what
// holds a cert (a store's record, a ledger export's line, a response of the wire protocol).
// JSON nested near that limit is valid alone, but a record holding it went over the limit and
// no longer decoded: the store gave back nothing for the intent ("holds an unreadable
// record"), though its effect had run. Prepare refuses arguments nested deeper; a result
// nested deeper is recorded exactly, in result_bytes, with a null readable result.
const MaxNesting = canon.MaxDepth - 64

// ResultReadable reports whether the cert's JSON form gives its result readable in result.
// It does not for a result that is not valid UTF-8 or is nested deeper than MaxNesting: there
// result is null, and result_bytes (base64) alone carries the result exactly, so a reader
// that took result for the result would take null (serve says so to a duplicate).
func (c *Cert) ResultReadable() bool {
	return c.ResultSHA256 == "" || readable(c.Result)
}

// readable reports whether the exact result b may also be written as the cert's readable
// result: it is JSON (canon.Valid), valid UTF-8, and nested no deeper than MaxNesting
// (Cert.MarshalJSON failed outright on a result nested 10,000 levels). canon.Valid, like
// encoding/json, lets any byte stand in a string: a result holding invalid UTF-8 written as it
// is made the whole cert (and the record and export line around it) invalid UTF-8, which
// stricter decoders refuse (Python's json.loads, docs/CERTS.md's recipe); result_bytes alone
// carries such a result.
func readable(b []byte) bool {
	return canon.Valid(b) && utf8.Valid(b) && nestedWithin(b, MaxNesting)
}

// nestedWithin reports whether the valid JSON text b nests arrays and objects no deeper than
// limit. A value nested n deep takes at least 2n bytes, and at least n brackets or braces,
// so the bytes are looked at one by one only for a long result with many of them.
func nestedWithin(b []byte, limit int) bool {
	if len(b) <= 2*limit || bytes.Count(b, []byte("["))+bytes.Count(b, []byte("{")) <= limit {
		return true
	}
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '[', '{':
			if depth++; depth > limit {
				return false
			}
		case ']', '}':
			depth--
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
