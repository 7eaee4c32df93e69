package fence

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// What the ledger keeps of a call is, by default, everything: the canonical arguments and the
// result, so that a duplicate receives the recorded result. Two per-request settings keep less:
//
//   - Request.Redact names argument fields whose values are replaced by Redacted in what is
//     stored (the record and the cert). Identity is unaffected: the fingerprint is computed
//     from the full arguments before redaction, so a duplicate with the same values is still
//     recognised and one with different values is still an intent_conflict.
//   - Request.KeepResult = KeepHash keeps only the SHA-256 of the result's canonical JSON. A
//     duplicate of such an intent is told that it was done and when, and that the result was
//     not kept; it is never run again.
//
// Both settings are fixed by the attempt that claims the intent and recorded on its record.

// Redacted replaces the value of every redacted argument field in the ledger.
const Redacted = "[redacted]"

// KeepResult says what the ledger keeps of an effect's result.
type KeepResult string

const (
	// KeepFull keeps the result, replayed to duplicates (the default; "" means the same).
	KeepFull KeepResult = "full"
	// KeepHash keeps only the SHA-256 of the result's canonical JSON.
	KeepHash KeepResult = "hash"
)

// ParseKeepResult accepts "full" or "hash" ("" is full).
func ParseKeepResult(s string) (KeepResult, error) {
	switch KeepResult(s) {
	case "", KeepFull:
		return KeepFull, nil
	case KeepHash:
		return KeepHash, nil
	}
	return "", InvalidError{"keep_result", fmt.Sprintf("is %q; want full or hash", s)}
}

// MetaResultNotKept is the only member of the result a KeepHash cert carries in place of the
// real one: {"effectfence/result_not_kept":{"sha256":"<hex>"}}. The cert's hash covers it, so
// the cert still binds the real result: whoever holds it can check its SHA-256.
const MetaResultNotKept = "effectfence/result_not_kept"

// notKept is the stand-in result of a KeepHash cert (already canonical).
func notKept(sum string) json.RawMessage {
	return json.RawMessage(`{"` + MetaResultNotKept + `":{"sha256":"` + sum + `"}}`)
}

// ResultSHA256 returns the hex SHA-256 of the canonical JSON of result (empty means null): the
// digest a KeepHash cert records.
func ResultSHA256(result []byte) (string, error) {
	if len(result) == 0 {
		result = []byte("null")
	}
	c, err := canon.JSON(result)
	if err != nil {
		return "", InvalidError{"result", err.Error()}
	}
	return canon.Sum(c), nil
}

// ResultNotKept reports whether the cert records only its result's digest (KeepHash), and
// that digest.
func (c *Cert) ResultNotKept() (sha256 string, ok bool) {
	if !bytes.HasPrefix(c.Result, []byte(`{"`+MetaResultNotKept+`"`)) {
		return "", false
	}
	var v map[string]struct {
		SHA256 string `json:"sha256"`
	}
	if json.Unmarshal(c.Result, &v) != nil || len(v) != 1 {
		return "", false
	}
	x, ok := v[MetaResultNotKept]
	return x.SHA256, ok && len(x.SHA256) == 64
}

// SameResult reports whether result is the result the cert records: the very bytes, or the
// same value compared canonically (by digest when only the digest was kept). A result with no
// canonical form (a lone surrogate, a member written twice, not JSON) is the recorded one only
// as the very bytes; so is a recorded result with none.
func (c *Cert) SameResult(result []byte) bool {
	if len(result) == 0 {
		result = []byte("null")
	}
	if c.ResultSHA256 != "" && canon.Sum(result) == c.ResultSHA256 {
		return true // the very bytes recorded
	}
	r, err := canon.JSON(result)
	if err != nil {
		return false
	}
	if sum, ok := c.ResultNotKept(); ok {
		return canon.Sum(r) == sum
	}
	rec, err := canon.JSON(orNull(c.Result))
	return err == nil && bytes.Equal(r, rec)
}

// keptResult is what the ledger stores of a result under keep: the exact bytes, or (KeepHash)
// only the digest of the result's canonical JSON, so that the same result spelled another way
// is still recognised; a result no canonicaliser accepts is digested as its exact bytes (sum).
func keptResult(keep KeepResult, result []byte, sum *[canon.SumLen]byte) json.RawMessage {
	if keep != KeepHash {
		return result
	}
	digest, err := ResultSHA256(result)
	if err != nil {
		digest = string(sum[:])
	}
	return notKept(digest)
}

// MaxRedactPaths bounds Request.Redact.
const MaxRedactPaths = 64

// CheckRedactPath validates one redaction path: dot-separated object member names, where a
// segment "*" stands for every member of an object or every element of an array
// ("card.number", "items.*.card").
func CheckRedactPath(p string) error {
	if p == "" {
		return InvalidError{"redact", "a path must not be empty"}
	}
	for _, seg := range strings.Split(p, ".") {
		if seg == "" {
			return InvalidError{"redact", fmt.Sprintf("path %q has an empty segment", p)}
		}
	}
	return nil
}

// checkPrivacy validates the privacy settings of a request. The defaults (nothing redacted,
// the full result kept) take the inlined test.
func checkPrivacy(req *Request) error {
	if len(req.Redact) == 0 && req.KeepResult == "" {
		return nil
	}
	return checkPrivacySettings(req)
}

func checkPrivacySettings(req *Request) error {
	if len(req.Redact) > MaxRedactPaths {
		return InvalidError{"redact", fmt.Sprintf("names %d paths; at most %d", len(req.Redact), MaxRedactPaths)}
	}
	for _, p := range req.Redact {
		if err := CheckRedactPath(p); err != nil {
			return err
		}
	}
	_, err := ParseKeepResult(string(req.KeepResult))
	return err
}

// RedactArgs returns the canonical JSON of args with the value at every path replaced by
// Redacted; paths that name nothing are skipped, and args is returned as it is when nothing
// changes. args must be canonical JSON (what canon.JSON returns): names are compared as
// canonical JSON writes them, and only canonical args give a canonical answer. JSON that is not
// valid is an error.
//
// It reads args once, whatever the number of paths, matching them all at each member and
// element, and copies the spans between the values it replaces: the members of a canonical
// object are already in order, and a value replaced by a string leaves them so (the names do
// not change), so the copy is the canonical JSON of the redacted value. Where paths overlap
// ("a" and "a.b") the outermost value is replaced, as replacing one path after another left
// it. Decoding the arguments, walking them once per path and encoding them again allocated
// about 23 bytes and 0.4 objects per byte of arguments and took 0.1-0.4 s for 64 paths over
// 1 MiB; now a few objects and about a byte per byte (the copy), and a few milliseconds.
func RedactArgs(args []byte, paths []string) ([]byte, error) {
	if len(paths) == 0 {
		return args, nil
	}
	if !canon.Valid(args) {
		return nil, InvalidError{"args", "not valid JSON"}
	}
	return redactCanonical(args, paths), nil
}

// redactCanonical is RedactArgs for args known to be valid (the engine's come from canon.JSON).
func redactCanonical(args []byte, paths []string) []byte {
	for len(paths) > 0 { // at most 64 paths per pass (a bit each); Request.Redact has no more
		n := min(len(paths), 64)
		args = redactPass(args, paths[:n])
		paths = paths[n:]
	}
	return args
}

// redactedJSON is Redacted as canonical JSON.
const redactedJSON = `"` + Redacted + `"`

// redactPaths matches at most 64 paths (a set of them is a bit mask of their indices) a level
// at a time. A level is made when the walk first goes that deep with some path still matching,
// so paths longer than the arguments nest cost no more than the arguments.
type redactPaths struct {
	rest   [64]string // the segments of each path not yet in a level
	left   uint64     // the paths with segments left
	levels []redactLevel
	names  []redactName // the names of each level's segments, each once, by length and then bytes
}

// redactLevel says which paths go on from a member or element of a value nested d levels
// deep: those whose segment d is "*", those whose segment d is its name, and which of these
// end there.
type redactLevel struct {
	star, named, ends uint64
	names             [2]int // its names are redactPaths.names[names[0]:names[1]]
}

// redactName is a segment that names a member: lit is the name as canonical JSON writes it
// (without quotes), so it is compared with a member's name as written, without unescaping.
type redactName struct {
	lit   string
	paths uint64
}

// level returns level d, making the levels up to it.
func (m *redactPaths) level(d int) *redactLevel {
	for len(m.levels) <= d {
		m.addLevel()
	}
	return &m.levels[d]
}

func (m *redactPaths) addLevel() {
	var l redactLevel
	start := len(m.names)
	n := bits.OnesCount64(m.left) // at most one name each
	if m.names == nil {
		n = max(n, 8) // room for most paths without growing
	}
	m.names = slices.Grow(m.names, n)
	for i := range m.rest {
		bit := uint64(1) << i
		if m.left&bit == 0 {
			continue
		}
		seg, rest, more := strings.Cut(m.rest[i], ".")
		m.rest[i] = rest
		switch lit, ok := canonicalName(seg); {
		case seg == "*":
			l.star |= bit
		case ok:
			l.named |= bit
			if j, found := slices.BinarySearchFunc(m.names[start:], lit, compareName); found {
				m.names[start+j].paths |= bit
			} else {
				m.names = slices.Insert(m.names, start+j, redactName{lit, bit})
			}
		} // a name no canonical JSON holds (invalid UTF-8) matches nothing
		if !more {
			l.ends |= bit
			m.left &^= bit
		}
	}
	l.names = [2]int{start, len(m.names)}
	m.levels = append(m.levels, l)
}

// compareName orders names by length, then bytes (lookup's order).
func compareName(n redactName, lit string) int {
	return cmp.Or(cmp.Compare(len(n.lit), len(lit)), strings.Compare(n.lit, lit))
}

// lookup returns the paths whose segment at level l names the member written lit.
func (m *redactPaths) lookup(l *redactLevel, lit []byte) uint64 {
	names := m.names[l.names[0]:l.names[1]]
	lo, hi := 0, len(names)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if x := names[h].lit; len(x) < len(lit) || len(x) == len(lit) && x < string(lit) {
			lo = h + 1
		} else {
			hi = h
		}
	}
	if lo < len(names) && names[lo].lit == string(lit) {
		return names[lo].paths
	}
	return 0
}

// canonicalName returns the member name s as canonical JSON writes it, without quotes, or
// false if s is not valid UTF-8 (no decoded name is).
func canonicalName(s string) (string, bool) {
	if !utf8.ValidString(s) {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			q := canon.AppendString(nil, s)
			return string(q[1 : len(q)-1]), true
		}
	}
	return s, true
}

// redactPass is RedactArgs for at most 64 paths over valid JSON b. It keeps a stack of the
// arrays and objects it is inside where some path may still match, each with those paths, and
// skips every other value whole, so the stack is no deeper than the longest path, and no
// deeper than b nests.
func redactPass(b []byte, paths []string) []byte {
	type open struct {
		paths uint64 // the paths that lead here, each with a segment left for a member
		array bool
	}
	var small [16]open
	stack := small[:0]
	var out []byte
	copied := 0 // b[:copied] is in out
	i := jsonrpc.SkipSpace(b, 0)
	if b[i] != '{' && b[i] != '[' {
		return b
	}
	m := redactPaths{left: 1<<len(paths) - 1} // all ones for 64
	copy(m.rest[:], paths)
	m.levels = make([]redactLevel, 0, 8) // room for most paths without growing
	stack = append(stack, open{m.left, b[i] == '['})
	i++
	for len(stack) > 0 {
		i = jsonrpc.SkipSpace(b, i)
		switch b[i] {
		case '}', ']':
			stack = stack[:len(stack)-1]
			i++
			continue
		case ',':
			i = jsonrpc.SkipSpace(b, i+1)
		}
		top, l := stack[len(stack)-1], m.level(len(stack)-1)
		next := top.paths & l.star
		if !top.array { // a member: its name, a colon, its value
			end := jsonrpc.EndOfString(b, i)
			if top.paths&l.named != 0 {
				next |= top.paths & m.lookup(l, b[i+1:end-1])
			}
			i = jsonrpc.SkipSpace(b, jsonrpc.SkipSpace(b, end)+1)
		}
		switch {
		case next == 0:
			i = jsonrpc.EndOfValue(b, i)
		case next&l.ends != 0:
			end := jsonrpc.EndOfValue(b, i)
			if string(b[i:end]) != redactedJSON {
				if out == nil { // room for replaced values a little shorter than Redacted
					out = make([]byte, 0, len(b)+len(b)/16+len(redactedJSON))
				}
				out = append(append(out, b[copied:i]...), redactedJSON...)
				copied = end
			}
			i = end
		case b[i] == '{' || b[i] == '[':
			stack = append(stack, open{next, b[i] == '['})
			i++
		default:
			i = jsonrpc.EndOfValue(b, i)
		}
	}
	if out == nil {
		return b
	}
	return append(out, b[copied:]...)
}

// set sets the call's canonical arguments, their fingerprint and what the ledger keeps of
// them (redacted at the paths in redact). Without redaction it is inlined.
func (c *call) set(canonical []byte, fp string, redact []string) {
	c.args, c.fp, c.stored = canonical, fp, canonical
	if len(redact) > 0 {
		c.stored = redactCanonical(canonical, redact)
	}
}

// Fingerprint returns the fingerprint the engine records for a call of tool with args (the
// one Record.Fingerprint holds), so a front end can check a caller's claim to have made a
// recorded call without the ledger keeping its arguments in the clear.
func (e *Engine) Fingerprint(tool string, args []byte) (string, error) {
	var c call
	if err := e.validate(&Request{Intent: "fingerprint", Tool: tool, Args: args}, &c); err != nil {
		return "", err
	}
	return c.fp, nil
}

// Fingerprints returns the fingerprints a call of tool with args matches a record by: its own
// (Fingerprint) and, with emptyAlike (Request.EmptyArgsAlike) and args absent, null or {}, the
// other form's.
func (e *Engine) Fingerprints(tool string, args []byte, emptyAlike bool) ([]string, error) {
	var c call
	if err := e.validate(&Request{Intent: "fingerprint", Tool: tool, Args: args}, &c); err != nil {
		return nil, err
	}
	fps := []string{c.fp}
	if other := otherEmptyArgs(c.args); emptyAlike && other != nil {
		fps = append(fps, canon.Sum(canon.ToolCallCanonical(tool, other)))
	}
	return fps, nil
}
