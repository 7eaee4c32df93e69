package jsonrpc

import (
	"bytes"
	"encoding/json"
	"iter"
	"strings"
)

// The scanners below walk JSON that is already known to be valid (json.Valid or a stricter
// check accepted it): they find where things end and never report errors. On anything else
// they may panic.

// SkipSpace returns the index of the first byte at or after i that is not JSON white space.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// EndOfString returns the index just past the string that starts (with its quote) at i.
func EndOfString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// EndOfValue returns the index just past the value that starts at i.
func EndOfValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return EndOfString(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = EndOfString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && !strings.ContainsRune(",}] \t\n\r", rune(b[i])) { // number, true, false, null
		i++
	}
	return i
}

// Unquote returns the string a valid JSON string literal (quotes included) stands for.
func Unquote(lit []byte) string {
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1])
	}
	var s string
	_ = json.Unmarshal(lit, &s) // valid, so it cannot fail
	return s
}

// KeyIs says whether the valid JSON string literal lit (quotes included) stands for name,
// without allocating when lit holds no escape.
func KeyIs(lit []byte, name string) bool {
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1:len(lit)-1]) == name
	}
	return Unquote(lit) == name
}

// Span is one member of an object: its name's literal b[Key:KeyEnd] (quotes included) and its
// value b[Start:End].
type Span struct{ Key, KeyEnd, Start, End int }

// Members yields the top-level members of the object b, in order; b must be valid JSON
// starting (after white space) with '{'.
func Members(b []byte) iter.Seq[Span] {
	return func(yield func(Span) bool) { walkMembers(b, yield) }
}

// walkMembers yields the members of the object b until yield says stop, and returns the index
// of the object's closing brace (or of the member it stopped at).
func walkMembers(b []byte, yield func(Span) bool) int {
	i := SkipSpace(b, SkipSpace(b, 0)+1)
	for b[i] == '"' {
		keyEnd := EndOfString(b, i)
		vs := SkipSpace(b, SkipSpace(b, keyEnd)+1) // past the colon
		ve := EndOfValue(b, vs)
		if !yield(Span{i, keyEnd, vs, ve}) {
			return i
		}
		if i = SkipSpace(b, ve); b[i] == ',' {
			i = SkipSpace(b, i+1)
		}
	}
	return i
}

// MemberValue is the value of the member of b named name, spelled so once its escapes are
// decoded (the last one, which JSON parsers keep), or nil when b (valid JSON) is not an object
// or has no such member. A member named so but for case is not it, as MCP's SDKs read names.
func MemberValue(b []byte, name string) []byte {
	i := SkipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil
	}
	start, end, _, _ := Member(b, name)
	if start < 0 {
		return nil
	}
	return b[start:end]
}

// Member finds the top-level members named name of the object b, which must be valid JSON
// starting (after white space) with '{': the span b[start:end] of the last one's value (the
// one JSON parsers keep), how many there are, and the index of the object's closing brace.
// start and end are -1 when there is none.
func Member(b []byte, name string) (start, end, count, closing int) {
	start, end = -1, -1
	closing = walkMembers(b, func(m Span) bool {
		if KeyIs(b[m.Key:m.KeyEnd], name) {
			start, end, count = m.Start, m.End, count+1
		}
		return true
	})
	return start, end, count, closing
}

// Cancelled reads the params of a notifications/cancelled as MCP's SDKs read them (the
// TypeScript and Python SDKs): the request it names is its member "requestId", spelled so once
// its escapes are decoded (the last one, which JSON parsers keep), and its reason the member
// "reason". A member named so but for case ("RequestId") is neither: Go's encoding/json took
// it for "requestId" and, given after it, kept it, so a cancellation the server reads as
// naming one request cancelled another. ok is false for a notification the SDKs refuse, which
// cancels nothing: params not a valid JSON object, no "requestId", or a "reason" that is not a
// string (null is taken for none, as the Python SDK takes it).
func Cancelled(params []byte) (requestID json.RawMessage, reason string, ok bool) {
	if !json.Valid(params) {
		return nil, "", false
	}
	requestID = MemberValue(params, "requestId")
	if requestID == nil {
		return nil, "", false
	}
	if raw := MemberValue(params, "reason"); raw != nil && json.Unmarshal(raw, &reason) != nil {
		return nil, "", false
	}
	return requestID, reason, true
}
