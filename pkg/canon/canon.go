// Package canon turns JSON into its canonical form and derives the SHA-256 fingerprints that
// effectfence uses as identities.
//
// The canonical form is RFC 8785 (JCS) with one change: a number is written from its exact
// decimal value, never rounded to an IEEE double first. Two JSON texts that mean the same
// value (member order, white space, number spelling such as 1, 1.0 and 1e0, string escapes)
// canonicalise to the same bytes; two that differ in any value, however far beyond double
// precision (9007199254740993 and 9007199254740992, 0.1 and 0.10000000000000000555),
// canonicalise to different bytes. For every number a JSON encoder writes from a double, the
// form is byte for byte RFC 8785. docs/identity.md states the rules.
//
// Input that different servers read differently is refused rather than guessed at: duplicate
// member names, invalid UTF-8, lone surrogate escapes.
package canon

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxInput bounds the size of one JSON text accepted for canonicalisation (64 MiB): larger
// payloads are refused with a clear error instead of being parsed into memory.
const MaxInput = 64 << 20

// ErrEmpty is returned for an empty input: absent JSON is not the JSON value null.
var ErrEmpty = errors.New("canon: empty JSON input")

// JSON returns the canonical form of one JSON text. Invalid JSON, trailing garbage, duplicate
// member names, invalid UTF-8, lone surrogates and inputs larger than MaxInput are errors.
func JSON(raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return nil, ErrEmpty
	}
	if len(raw) > MaxInput {
		return nil, fmt.Errorf("canon: JSON input of %d bytes exceeds the %d byte limit", len(raw), MaxInput)
	}
	out, err := canonical(raw)
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
	var h [SumLen]byte // on the stack: the string is the only allocation
	SumTo(&h, b)
	return string(h[:])
}

// SumLen is the length of Sum's answer.
const SumLen = 2 * sha256.Size

// SumTo writes Sum(b) to h, for a caller that makes one string of several digests.
func SumTo(h *[SumLen]byte, b []byte) {
	s := sha256.Sum256(b)
	for i, v := range s {
		// One table load per byte, at indices the compiler proves in bounds: about a third of
		// hex.Encode's instructions.
		p := hexPairs[v]
		h[2*i], h[2*i+1] = p[0], p[1]
	}
}

// HexPair returns the two lowercase hex digits of b: one table load (SumTo's, and the
// engine's nonces).
func HexPair(b byte) [2]byte { return hexPairs[b] }

// hexPairs holds the two lowercase hex digits of every byte.
var hexPairs = func() (t [256][2]byte) {
	const digits = "0123456789abcdef"
	for i := range t {
		t[i] = [2]byte{digits[i>>4], digits[i&0xF]}
	}
	return t
}()

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
	if plain(s) { // most strings (ids, names, digests): copied at once
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	const hexd = "0123456789abcdef"
	b = append(b, '"')
	start := 0 // s[start:i] is a run of bytes that stand for themselves, copied at once
	for i := 0; i < len(s); {
		for len(s)-i >= 8 && plain8(load64(s[i:])) {
			i += 8 // eight bytes that stand for themselves, tested at once
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
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
			if c < 0x20 {
				b = append(b, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xF])
				break
			}
			// Multi-byte: re-encoded, so an invalid sequence becomes U+FFFD as ranging over
			// the string would make it.
			r, size := utf8.DecodeRuneInString(s[i:])
			b = utf8.AppendRune(b, r)
			i += size - 1
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plain reports whether every byte of s stands for itself in a string, eight at a time: the
// last eight overlap bytes already tested, and a string shorter than eight is padded with a
// byte that stands for itself.
func plain(s string) bool {
	i := 0
	for ; len(s)-i >= 8; i += 8 {
		if !plain8(load64(s[i:])) {
			return false
		}
	}
	switch {
	case i == len(s):
		return true
	case len(s) >= 8:
		return plain8(load64(s[len(s)-8:]))
	}
	w := [8]byte{'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'}
	copy(w[:], s)
	return plain8(binary.LittleEndian.Uint64(w[:]))
}

// load64 returns the first eight bytes of w (at least eight long) as a little-endian word.
func load64(w string) uint64 {
	w = w[:8] // one bounds check; the eight loads become one
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// plain8 reports whether all eight bytes of x stand for themselves in a string: none is
// '"', '\\', a control character (inString8) or the start of a multi-byte sequence (a byte
// of 0x80 or over).
func plain8(x uint64) bool { return x&0x8080808080808080 == 0 && inString8(x) }
