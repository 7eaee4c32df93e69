package fence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/effectfence/effectfence/pkg/canon"
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

// SameResult reports whether result is the result the cert records (compared canonically, or
// by digest when only the digest was kept).
func (c *Cert) SameResult(result []byte) (bool, error) {
	if len(result) == 0 {
		result = []byte("null")
	}
	if c.ResultSHA256 != "" && canon.Sum(result) == c.ResultSHA256 {
		return true, nil // the very bytes recorded
	}
	r, err := canon.JSON(result)
	if err != nil {
		return false, InvalidError{"result", err.Error()}
	}
	if sum, ok := c.ResultNotKept(); ok {
		return canon.Sum(r) == sum, nil
	}
	rec, err := canon.JSON(orNull(c.Result))
	if err != nil {
		return false, err
	}
	return bytes.Equal(r, rec), nil
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
// Redacted; paths that name nothing are skipped. args must be canonical JSON.
func RedactArgs(args []byte, paths []string) ([]byte, error) {
	if len(paths) == 0 {
		return args, nil
	}
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber() // re-encoding must not change any number
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, InvalidError{"args", err.Error()}
	}
	changed := false
	for _, p := range paths {
		if redactAt(v, strings.Split(p, ".")) {
			changed = true
		}
	}
	if !changed {
		return args, nil
	}
	out, err := canon.Marshal(v)
	if err != nil {
		return nil, InvalidError{"args", err.Error()}
	}
	return out, nil
}

// redactAt replaces the values at path inside v and reports whether any was found.
func redactAt(v any, path []string) bool {
	seg, rest := path[0], path[1:]
	found := false
	visit := func(get func() any, set func()) {
		if len(rest) == 0 {
			set()
			found = true
			return
		}
		if redactAt(get(), rest) {
			found = true
		}
	}
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if seg != "*" && k != seg {
				continue
			}
			visit(func() any { return child }, func() { x[k] = Redacted })
		}
	case []any:
		if seg != "*" {
			return false
		}
		for i := range x {
			visit(func() any { return x[i] }, func() { x[i] = Redacted })
		}
	}
	return found
}

// set sets the call's canonical arguments, their fingerprint and what the ledger keeps of
// them (redacted at the paths in redact), before any transaction, so a redaction that fails
// refuses the request without touching the ledger. Without redaction it is inlined.
func (c *call) set(canonical []byte, fp string, redact []string) error {
	c.args, c.fp, c.stored = canonical, fp, canonical
	if len(redact) == 0 {
		return nil
	}
	return c.redact(redact)
}

func (c *call) redact(redact []string) error {
	stored, err := RedactArgs(c.args, redact)
	if err != nil {
		return err
	}
	c.stored = stored
	return nil
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
