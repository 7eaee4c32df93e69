// Package safetext makes text that came from a ledger, an agent or an MCP server safe to show
// on a terminal. Such text is chosen by whoever wrote it: an intent id, a tool name, a reason,
// a server's answer or its stderr can carry escape sequences that set the terminal's title,
// clear the screen, move the cursor, or reorder what is shown (bidi overrides), and so forge
// a report. It can also carry characters that are drawn as nothing, so that two different
// intent ids ("pay:1" and "pay:\u200b1") look the same and an operator clears or resolves the
// wrong one, or a reason hides text. Every command passes such text through this package
// before printing it.
//
// Escape makes every such character visible instead of acting on it or vanishing:
//   - C0 controls, DEL and C1 controls (U+0080–U+009F);
//   - the line and paragraph separators (U+2028, U+2029);
//   - every format character (Unicode category Cf): the bidi embeddings, overrides, isolates
//     and marks, the zero-width space, non-joiner and joiner (U+200B–U+200D), the word joiner
//     and invisible operators (U+2060–U+2064), the soft hyphen (U+00AD), the byte order mark
//     (U+FEFF), the interlinear annotation characters (U+FFF9–U+FFFB), the tag characters
//     (U+E0001, U+E0020–U+E007F), and the rest of Cf;
//   - the other default-ignorable code points, which a terminal draws as nothing or as a
//     blank: the variation selectors (U+180B–U+180D, U+180F, U+FE00–U+FE0F,
//     U+E0100–U+E01EF), the combining grapheme joiner (U+034F), the Hangul fillers (U+115F,
//     U+1160, U+3164, U+FFA0), the Khmer inherent vowels (U+17B4, U+17B5), and the
//     unassigned code points Unicode reserves as default-ignorable (U+2065, U+FFF0–U+FFF8,
//     the rest of U+E0000–U+E0FFF), so one assigned after this build's tables is escaped too;
//   - bytes that are not UTF-8.
//
// The set is Unicode's Default_Ignorable_Code_Point plus all of Cf, read from the unicode
// package's tables rather than listed by hand. A few Cf characters are drawn (the Arabic
// number signs U+0600–U+0605, for instance); they are escaped anyway: one rule is easier to
// trust than a list of exceptions, and they have no business in an id. The price is paid by
// emoji: the zero-width joiner that builds a family or a profession from several emoji, and
// the variation selector U+FE0F that asks for the emoji form of "❤", are shown as \u200d and
// \ufe0f, because nothing here can tell a joiner between two emoji from a joiner between two
// digits of an id, and telling ids apart matters more than pretty emoji in a report.
// Characters that are visible but look alike (a Cyrillic "а" for a Latin "a", a no-break
// space for a space) are not this package's concern: they are shown, not hidden.
//
// Escapes are written the way Go and JSON write them (\n, \t, \x1b, \u202e, and \U000e0001
// for a character beyond U+FFFF), so they are readable and cannot act; bash and zsh read the
// same forms inside $'…'. Escape leaves a backslash as it is: a string that already contains
// the text "\x1b" is shown as that text, which is harmless. EscapeExact, for ids, writes it
// \\, so that text and the character it spells look different.
//
// Clip shortens escaped text on whole escapes, so a clipped string never ends in the middle
// of one. JSON rewrites every such character that JSON allows raw inside strings (all of them
// but C0) as a \u escape, a character beyond U+FFFF as its UTF-16 surrogate pair
// (\udb40\udc01), which leaves the document's meaning unchanged.
package safetext

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode"
	"unicode/utf16"
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
	case r < 0xad: // below the soft hyphen, the first format character
		return false
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	}
	// Format characters (bidi controls and marks, zero-width space, joiners, BOM, tags...)
	// and the other default-ignorable code points, which are drawn as nothing.
	return unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
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
	case r > 0xffff: // \u takes exactly four digits: \ue0001 would read as U+E000 and "1"
		fmt.Fprintf(sb, `\U%08x`, r)
	default:
		fmt.Fprintf(sb, `\u%04x`, r)
	}
}

// Escape returns s with every character that could act on a terminal written as a visible
// escape, including tab and newline: the result is one line.
func Escape(s string) string { return escape(s, false, false) }

// EscapeExact is Escape for a name that must be told from every other, an intent id above all:
// a backslash is written \\ too, as Go writes it. Escape leaves it as it is, so an id holding
// U+200B and one holding the six characters \u200b were both shown pay:\u200b1, and an operator
// could clear the one he did not mean.
func EscapeExact(s string) string { return escape(s, false, true) }

// EscapeText is Escape for multi-line text: newlines and tabs are kept, everything else
// that could act on a terminal (carriage return included) is escaped.
func EscapeText(s string) string { return escape(s, true, false) }

func escape(s string, keepLines, exact bool) string {
	if clean(s, keepLines) && !(exact && strings.IndexByte(s, '\\') >= 0) {
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
		case exact && r == '\\':
			sb.WriteString(`\\`)
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
func Clip(s string, n int) string { return clip(Escape(s), n) }

// ClipExact is Clip of EscapeExact(s).
func ClipExact(s string, n int) string { return clip(EscapeExact(s), n) }

// clip shortens e, escaped text, to at most n characters.
func clip(e string, n int) string {
	if n < 1 {
		n = 1
	}
	if utf8.RuneCountInString(e) <= n {
		return e
	}
	// Walk the escaped text unit by unit: a unit is one character, or one whole escape
	// (\n, \x1b, \u202e, \U000e0001) that Escape wrote.
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
		case 'n', 'r', 't', '\\':
			return 2
		case 'x':
			if len(e) >= 4 && isHex(e[2]) && isHex(e[3]) {
				return 4
			}
		case 'u':
			if len(e) >= 6 && allHex(e[2:6]) {
				return 6
			}
		case 'U':
			if len(e) >= 10 && allHex(e[2:10]) {
				return 10
			}
		}
	}
	_, w := utf8.DecodeRuneInString(e)
	return w
}

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// JSON returns the JSON text b with every character Escape escapes that JSON allows raw
// inside strings (DEL, C1 controls, separators, format characters, the other
// default-ignorable code points) rewritten as a \u escape, or as the \u escapes of its
// UTF-16 surrogate pair beyond U+FFFF, the only way JSON writes such a character. Outside
// strings such characters cannot occur in valid JSON, so the document means exactly what it
// meant; it just cannot act on a terminal or hide any more. Control characters below U+0020
// are already escaped by every JSON encoder (they are not allowed raw).
func JSON(b []byte) []byte {
	if jsonClean(b) {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError && r >= 0x7f && unsafe(r) {
			if r > 0xffff {
				hi, lo := utf16.EncodeRune(r)
				out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
			} else {
				out = fmt.Appendf(out, `\u%04x`, r)
			}
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
