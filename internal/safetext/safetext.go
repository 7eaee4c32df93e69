// Package safetext makes text that came from a ledger, an agent or an MCP server safe to show
// on a terminal. Such text is chosen by whoever wrote it: an intent id, a tool name, a reason,
// a server's answer or its stderr can carry escape sequences that set the terminal's title,
// clear the screen, move the cursor, or reorder what is shown (bidi overrides), and so forge
// a report. Every command passes such text through this package before printing it.
//
// Escape makes every such character visible instead of acting on it: C0 controls, DEL, C1
// controls (U+0080–U+009F), the bidi embeddings, overrides and isolates, the bidi marks, the
// line and paragraph separators, and bytes that are not UTF-8. Escapes are written the way Go
// and JSON write them (\n, \t, \x1b, \u202e), so they are readable and cannot act.
// A backslash is left as it is: a string that already contains the text "\x1b" is shown as
// that text, which is harmless.
//
// Clip shortens escaped text on whole escapes, so a clipped string never ends in the middle
// of one. JSON rewrites the characters that JSON allows raw inside strings (DEL, C1, bidi
// controls, separators) as \u escapes, which leaves the document's meaning unchanged.
package safetext

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// unsafe reports whether r must not reach a terminal as is. Tab and newline are handled by
// the callers: they are unsafe in a single field and kept in multi-line text.
func unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f:
		return true
	case r >= 0x80 && r <= 0x9f: // C1 controls, among them CSI (U+009B) and OSC (U+009D)
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // Arabic letter mark, LRM, RLM
		return true
	case r >= 0x202a && r <= 0x202e: // LRE, RLE, PDF, LRO, RLO
		return true
	case r >= 0x2066 && r <= 0x2069: // LRI, RLI, FSI, PDI
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	case r == 0xfeff: // zero-width no-break space (byte order mark)
		return true
	}
	return false
}

// appendEscape appends the visible form of r (or of the invalid byte b when r is RuneError
// of width 1).
func appendEscape(sb *strings.Builder, r rune, b byte, invalid bool) {
	switch {
	case invalid:
		fmt.Fprintf(sb, `\x%02x`, b)
	case r == '\n':
		sb.WriteString(`\n`)
	case r == '\r':
		sb.WriteString(`\r`)
	case r == '\t':
		sb.WriteString(`\t`)
	case r < 0x80:
		fmt.Fprintf(sb, `\x%02x`, r)
	default:
		fmt.Fprintf(sb, `\u%04x`, r)
	}
}

// Escape returns s with every character that could act on a terminal written as a visible
// escape, including tab and newline: the result is one line.
func Escape(s string) string { return escape(s, false) }

// EscapeText is Escape for multi-line text: newlines and tabs are kept, everything else
// that could act on a terminal (carriage return included) is escaped.
func EscapeText(s string) string { return escape(s, true) }

func escape(s string, keepLines bool) string {
	if clean(s, keepLines) {
		return s
	}
	var sb strings.Builder
	sb.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			appendEscape(&sb, r, s[i], true)
		case keepLines && (r == '\n' || r == '\t'):
			sb.WriteRune(r)
		case unsafe(r):
			appendEscape(&sb, r, 0, false)
		default:
			sb.WriteString(s[i : i+w])
		}
		i += w
	}
	return sb.String()
}

// clean reports whether s needs no escaping (the common case, without allocating).
func clean(s string, keepLines bool) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && !(keepLines && (c == '\n' || c == '\t'))) || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && w == 1) || unsafe(r) {
			return false
		}
		i += w
	}
	return true
}

// Clip escapes s as Escape does and shortens the result to at most n characters, ending
// in "…" when it was shortened. It cuts between whole characters and whole escapes, never
// inside one. n below 1 is taken as 1.
func Clip(s string, n int) string {
	if n < 1 {
		n = 1
	}
	e := Escape(s)
	if utf8.RuneCountInString(e) <= n {
		return e
	}
	// Walk the escaped text unit by unit: a unit is one character, or one whole escape
	// (\n, \x1b, \u202e) that Escape wrote.
	var sb strings.Builder
	used := 0
	for i := 0; i < len(e); {
		w := unitLen(e[i:])
		cost := utf8.RuneCountInString(e[i : i+w])
		if used+cost > n-1 {
			break
		}
		sb.WriteString(e[i : i+w])
		used += cost
		i += w
	}
	return sb.String() + "…"
}

// unitLen is the byte length of the first unit of escaped text: a backslash escape written
// by Escape, or one character. A backslash that starts no such escape is one character.
func unitLen(e string) int {
	if len(e) >= 2 && e[0] == '\\' {
		switch e[1] {
		case 'n', 'r', 't':
			return 2
		case 'x':
			if len(e) >= 4 && isHex(e[2]) && isHex(e[3]) {
				return 4
			}
		case 'u':
			if len(e) >= 6 && isHex(e[2]) && isHex(e[3]) && isHex(e[4]) && isHex(e[5]) {
				return 6
			}
		}
	}
	_, w := utf8.DecodeRuneInString(e)
	return w
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// JSON returns the JSON text b with every DEL, C1 control, bidi control and separator that
// JSON allows raw inside strings rewritten as a \u escape. Outside strings such characters
// cannot occur in valid JSON, so the document means exactly what it meant; it just cannot
// act on a terminal any more. Control characters below U+0020 are already escaped by every
// JSON encoder (they are not allowed raw).
func JSON(b []byte) []byte {
	if jsonClean(b) {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError && r >= 0x7f && unsafe(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[i:i+w]...)
		}
		i += w
	}
	return out
}

func jsonClean(b []byte) bool {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			if b[i] == 0x7f {
				return false
			}
			i++
			continue
		}
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError && unsafe(r) {
			return false
		}
		i += w
	}
	return true
}

// Writer escapes what is written through it as EscapeText does, for logs and for another
// process's stderr: lines and tabs pass, everything else that could act on a terminal is made
// visible. A UTF-8 sequence split across two writes is joined before it is judged. It is safe
// for concurrent use.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	partial []byte // the start of a UTF-8 sequence the last write ended in
}

// NewWriter returns a Writer over w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it. It reports len(p) when the escaped form was written whole.
func (sw *Writer) Write(p []byte) (int, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	buf := append(sw.partial, p...)
	sw.partial = nil
	// Keep back an incomplete UTF-8 sequence at the end (at most 3 bytes) for the next write.
	if cut := incompleteTail(buf); cut > 0 {
		sw.partial = bytes.Clone(buf[len(buf)-cut:])
		buf = buf[:len(buf)-cut]
	}
	if _, err := io.WriteString(sw.w, EscapeText(string(buf))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// incompleteTail returns how many bytes at the end of b start a UTF-8 sequence that is not
// complete yet (0 when b ends on a whole character or on bytes that can never be one).
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < utf8.RuneSelf {
			return 0
		}
		if utf8.RuneStart(c) {
			need := 0
			switch {
			case c&0xe0 == 0xc0:
				need = 2
			case c&0xf0 == 0xe0:
				need = 3
			case c&0xf8 == 0xf0:
				need = 4
			}
			if need > k {
				return k
			}
			return 0
		}
	}
	return 0
}

// LogWriter is for a log.Logger, which writes each entry with one Write: the entry is
// escaped as Escape does, so a newline inside it cannot start a forged entry, and ends in
// one newline.
type LogWriter struct{ w io.Writer }

// NewLogWriter returns a LogWriter over w.
func NewLogWriter(w io.Writer) LogWriter { return LogWriter{w} }

// Write writes p as one escaped line.
func (lw LogWriter) Write(p []byte) (int, error) {
	line := Escape(strings.TrimSuffix(string(p), "\n")) + "\n"
	if _, err := io.WriteString(lw.w, line); err != nil {
		return 0, err
	}
	return len(p), nil
}
