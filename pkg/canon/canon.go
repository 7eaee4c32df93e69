// Package canon turns JSON into its RFC 8785 (JCS) canonical form and derives the SHA-256
// fingerprints that effectfence uses as identities.
//
// Two JSON texts that mean the same value (key order, white space, number spelling, string
// escapes) canonicalise to the same bytes, so they hash the same. Canonicalisation is done by
// github.com/gowebpki/jcs; this package only fixes how effectfence builds the objects it hashes,
// so that every caller (the engine, wrap, probe, an external verifier) agrees byte for byte.
package canon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// MaxInput bounds the size of one JSON text accepted for canonicalisation (64 MiB): larger
// payloads are refused with a clear error instead of being parsed into memory.
const MaxInput = 64 << 20

// ErrEmpty is returned for an empty input: absent JSON is not the JSON value null.
var ErrEmpty = errors.New("canon: empty JSON input")

// JSON returns the RFC 8785 canonical form of one JSON text. Invalid JSON, trailing garbage and
// inputs larger than MaxInput are errors.
func JSON(raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return nil, ErrEmpty
	}
	if len(raw) > MaxInput {
		return nil, fmt.Errorf("canon: JSON input of %d bytes exceeds the %d byte limit", len(raw), MaxInput)
	}
	// The fast path accepts only what it fully checked; everything else goes through
	// json.Valid (the strict gate, so what we canonicalise is exactly what any standard JSON
	// parser accepts) and the library.
	if out, ok := fastJSON(raw); ok {
		return out, nil
	}
	if !json.Valid(raw) {
		return nil, errors.New("canon: invalid JSON")
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canon: %w", err)
	}
	return out, nil
}

// Marshal encodes v with encoding/json and canonicalises the result.
func Marshal(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("canon: %w", err)
	}
	return JSON(raw)
}

// Sum returns the lowercase hex SHA-256 of b.
func Sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ToolCall returns the canonical JSON of {"tool": tool, "args": args}, the object that identifies
// one tool call. Empty args mean JSON null.
func ToolCall(tool string, args []byte) ([]byte, error) {
	if len(args) == 0 {
		args = []byte("null")
	}
	c, err := JSON(args)
	if err != nil {
		return nil, err
	}
	return ToolCallCanonical(tool, c), nil
}

// ToolCallCanonical is ToolCall for arguments that are already canonical: it only assembles
// the object ("args" sorts before "tool"), so no second parse is needed.
func ToolCallCanonical(tool string, canonArgs []byte) []byte {
	buf := make([]byte, 0, len(canonArgs)+len(tool)+20)
	buf = append(buf, `{"args":`...)
	buf = append(buf, canonArgs...)
	buf = append(buf, `,"tool":`...)
	buf = AppendString(buf, tool)
	return append(buf, '}')
}

// Fingerprint returns the hex SHA-256 of ToolCall(tool, args): equal for every spelling of the
// same call, different for any change of tool or argument value.
func Fingerprint(tool string, args []byte) (string, error) {
	c, err := ToolCall(tool, args)
	if err != nil {
		return "", err
	}
	return Sum(c), nil
}

// AppendString appends s serialised as RFC 8785 serialises strings: only '"', '\\' and
// control characters are escaped, with the short forms where JSON has them. Invalid UTF-8
// becomes U+FFFD, as encoding/json does.
func AppendString(b []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"':
			b = append(b, '\\', '"')
		case r == '\\':
			b = append(b, '\\', '\\')
		case r == '\b':
			b = append(b, '\\', 'b')
		case r == '\f':
			b = append(b, '\\', 'f')
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexd[r>>4], hexd[r&0xF])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}
