package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestParseRefusesControlCharacters: YAML does not allow a control character written as
// itself (only tab and line breaks), but the YAML parser read one as part of the text around
// it, so a file holding one was accepted or refused for another reason. A NUL after
// `version: 1` was "version must be 1"; an escape sequence in a comment (ESC [2K erases the
// line a terminal shows, and what follows is printed in its place) or a backspace inside a
// redact path reached the policy unseen by a reviewer reading the file in a terminal, as a
// format character would. Each is refused at its line and column, naming the character and
// its escape; written as an escape in a double-quoted string it is visible, and is the text.
func TestParseRefusesControlCharacters(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"NUL after the version", "version: 1\x00\n", "bad.yaml:1:11: the file holds U+0000"},
		{"NUL in a comment", "version: 1\n# \x00\ntools: {}\n", "bad.yaml:2:3: the file holds U+0000"},
		{"escape sequence in a comment", "version: 1\ntools:\n  charge:\n    fence: false  # \x1b[2K\x1b[1G    fence: true\n", "bad.yaml:4:21: the file holds U+001B"},
		{"backspace in a redact path", "version: 1\ndefaults:\n  redact: [card.numbe\x08er]\n", "bad.yaml:3:22: the file holds U+0008"},
		{"DEL in a key path", "version: 1\ntools:\n  c:\n    key: [order\x7f_id]\n", "bad.yaml:4:16: the file holds U+007F"},
		{"C1 control in a quoted name", "version: 1\ntools:\n  \"list_\u009b*\":\n    fence: false\n", "bad.yaml:3:9: the file holds U+009B"},
		{"vertical tab in the scope", "version: 1\nscope: a\vb\n", "bad.yaml:2:9: the file holds U+000B"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("bad.yaml", []byte(c.src))
			if err == nil || !strings.HasPrefix(err.Error(), c.want+", a control character") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v (%+v); want one error starting %q naming the control character", err, p, c.want)
			}
		})
	}
	// Tabs and line breaks are YAML's own; an escape in a double-quoted string is visible.
	p, err := Parse("ok.yaml", []byte("version: 1\t# a tab\r\ntools:\r\n  c:\n    redact: [\"a\\x08b\"]\n"))
	if err != nil || len(p.Tools) != 1 || len(p.Tools[0].Redact) != 1 || p.Tools[0].Redact[0] != "a\bb" {
		t.Fatalf("tab, CRLF and an escaped control character: %v %+v", err, p)
	}
}

// TestLoneCarriageReturnIsRefused: a CR not followed by LF is a line break to YAML, but a
// terminal draws what follows it over the start of its line: `pass: [charge]<CR># note` is
// shown as a comment and lets charge through unfenced. Before 2026-12-06 it was accepted.
func TestLoneCarriageReturnIsRefused(t *testing.T) {
	for _, src := range []string{
		"version: 1\npass: [charge]\r# reviewed: nothing passes\n",
		"version: 1\r\ntools:\r\n  é:\r  c: {}\r\n",
		"version: 1\rpass: [charge]\r",
	} {
		p, err := Parse("cr.yaml", []byte(src))
		var es Errors
		if !errors.As(err, &es) || len(es) != 1 || !strings.Contains(es[0].Msg, "carriage return") {
			t.Fatalf("%q: got %v (%+v); want one error naming the carriage return", src, err, p)
		}
		i := strings.Index(strings.ReplaceAll(src, "\r\n", "\n"), "\r")
		before := strings.ReplaceAll(src, "\r\n", "\n")[:i]
		line := strings.Count(before, "\n") + 1
		col := len([]rune(before[strings.LastIndex(before, "\n")+1:])) + 1
		if es[0].Line != line || es[0].Column != col {
			t.Fatalf("%q: the error is at %d:%d, the CR at %d:%d", src, es[0].Line, es[0].Column, line, col)
		}
	}
}

// TestLineAndParagraphSeparatorsAreRefused: U+2028 and U+2029 are text to this YAML parser
// (YAML 1.2), but a line break to YAML 1.1 parsers (PyYAML) and to a Unicode text renderer (a
// browser, a code review page), so what a reviewer sees on a line of its own was part of the
// line before it: `# card data<U+2028>    redact: [card.number]` showed a redact that was a
// comment's text, the policy passed and the card number was kept in the ledger in clear.
// Before 2026-12-07 the file was accepted. Each is refused at its line and column; written as
// an escape in a double-quoted string it is visible, and is the text.
func TestLineAndParagraphSeparatorsAreRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, src, want string }{
		{"line separator ending a comment", "version: 1\ntools:\n  charge:\n    key: [order_id]\n    # card data\u2028    redact: [card.number]\n", "bad.yaml:5:16: the file holds U+2028"},
		{"paragraph separator ending a comment", "version: 1\ntools:\n  charge:\n    # fenced\u2029    fence: true\n", "bad.yaml:4:13: the file holds U+2029"},
		{"line separator after a value's comment", "version: 1 # x\u2028fence_reads: true\n", "bad.yaml:1:15: the file holds U+2028"},
		{"line separator in a plain value", "version: 1\nscope: pay\u2028ments\n", "bad.yaml:2:11: the file holds U+2028"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("bad.yaml", []byte(c.src))
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 || !strings.HasPrefix(err.Error(), c.want+", a line or paragraph separator") {
				t.Fatalf("got %v (%+v); want one error starting %q naming the separator", err, p, c.want)
			}
		})
	}
	p, err := Parse("ok.yaml", []byte("version: 1\nscope: \"a\\u2028b\"\n"))
	if err != nil || p.Scope != "a\u2028b" {
		t.Fatalf("an escaped line separator: %v %+v", err, p)
	}
}

// TestBlankBeforeHashRefused: only a space or a tab before '#' starts a YAML comment. A plain
// value with another blank there (a no-break space, an ideographic space, the braille blank)
// reads, to a reviewer, as the value and a comment: `- card.number<U+00A0># the PAN` looks
// like card.number with a note, but named the member "number<U+00A0># the PAN", so the
// policy passed and the card number was kept in the ledger in clear. Before 2026-12-07 each
// of these was accepted. Quoted, the '#' is seen to be the value's, and is taken as written.
func TestBlankBeforeHashRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, src, want string }{
		{"a redact item", "version: 1\ntools:\n  charge:\n    redact:\n      - card.number\u00a0# the PAN\n", "bad.yaml:5:20: redact: "},
		{"a key item in a flow list", "version: 1\ntools:\n  charge:\n    key: [order_id\u3000# one per order]\n", "bad.yaml:4:19: key: "},
		{"an ignored path", "version: 1\ndefaults:\n  ignore: [meta.ts\u2800#volatile]\n", "bad.yaml:3:19: ignore: "},
		{"the scope", "version: 1\nscope: payments\u00a0# the fleet's\n", "bad.yaml:2:16: scope: "},
		{"the ledger", "version: 1\nledger: ./ledger.db\u202f# shared\n", "bad.yaml:2:20: ledger: "},
		{"a redact item of two lines", "version: 1\ntools:\n  charge:\n    redact:\n      - card\n        .number\u00a0# the PAN\n", "bad.yaml:5:9: redact: "},
		{"a hook argument", "version: 1\non_unknown:\n  command: [notify, --team\u00a0# payments]\n", "bad.yaml:3:27: command: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("bad.yaml", []byte(c.src))
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 || !strings.HasPrefix(err.Error(), c.want) || !strings.Contains(err.Error(), "comment") {
				t.Fatalf("got %v (%+v); want one error starting %q about the comment it looks like", err, p, c.want)
			}
		})
	}
	p, err := Parse("ok.yaml", []byte("version: 1\ntools:\n  charge:\n    redact:\n      - \"card.number\u00a0# the PAN\" # quoted\n      - card.cvc # a comment\n"))
	if err != nil || len(p.Tools) != 1 || !slices.Equal(p.Tools[0].Redact, []string{"card.number\u00a0# the PAN", "card.cvc"}) {
		t.Fatalf("a quoted '#' and a comment: %v %+v", err, p)
	}
}
