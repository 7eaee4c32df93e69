package safetext

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile holds what an agent can put in an intent, a reason or an answer to attack the
// terminal of the operator who reads it.
var hostile = []string{
	"\x1b]0;pwned\x07",         // OSC: set the window title
	"\x1b[2J\x1b[H",            // clear the screen, cursor home
	"\x1b[32mall clear\x1b[0m", // fake green verdict
	"ok\rFORGED",               // carriage return overwrites the line
	"\u009b2J",                 // C1 CSI: clear screen on terminals that honour 8-bit controls
	"\u009d0;t\u009c",          // C1 OSC ... ST
	"abc\u202edcba",            // RLO: reorders what follows
	"\u2066x\u2069",            // isolates
	"a\u200fb\u061c",           // bidi marks
	"line\u2028sep",            // line separator
	"bad\xffutf8\xc3",          // not UTF-8
	"\x7fdel\x00nul\bbs",       // DEL, NUL, backspace
	"tab\tnewline\n",
}

func actsOnTerminal(s string) bool {
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && w == 1) || unsafe(r) {
			return true
		}
		i += w
	}
	return false
}

func TestEscapeLeavesNothingThatActs(t *testing.T) {
	for _, h := range hostile {
		for _, got := range []string{Escape(h), Clip(h, 5), Clip(h, 200)} {
			if actsOnTerminal(got) {
				t.Errorf("%q -> %q still holds a control character", h, got)
			}
		}
		if got := EscapeText(h); actsOnTerminal(strings.NewReplacer("\n", "", "\t", "").Replace(got)) {
			t.Errorf("EscapeText(%q) = %q still holds a control character", h, got)
		}
	}
}

func TestEscapeForms(t *testing.T) {
	cases := []struct{ in, want, text string }{
		{"charge:order-123", "charge:order-123", "charge:order-123"},
		{"héllo wörld ✓ 日本", "héllo wörld ✓ 日本", "héllo wörld ✓ 日本"},
		{"\x1b[2J", `\x1b[2J`, `\x1b[2J`},
		{"a\r\nb\tc", `a\r\nb\tc`, "a\\r\nb\tc"},
		{"\u009b", `\u009b`, `\u009b`},
		{"x\u202ey", `x\u202ey`, `x\u202ey`},
		{"\xff", `\xff`, `\xff`},
		{`C:\x1b\path`, `C:\x1b\path`, `C:\x1b\path`}, // a literal backslash stays as it is
	}
	for _, c := range cases {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := EscapeText(c.in); got != c.text {
			t.Errorf("EscapeText(%q) = %q, want %q", c.in, got, c.text)
		}
	}
}

func TestClipNeverCutsAnEscape(t *testing.T) {
	s := "ab\x1bcd\u202eef\ngh"
	// Escaped: ab \x1b c d \u202e e f \n g h
	for n := 1; n <= 40; n++ {
		got := Clip(s, n)
		if utf8.RuneCountInString(got) > n {
			t.Errorf("Clip(_, %d) = %q: longer than %d", n, got, n)
		}
		body := strings.TrimSuffix(got, "…")
		// Every backslash in the result starts a whole escape.
		for i := 0; i < len(body); i++ {
			if body[i] == '\\' {
				w := unitLen(body[i:])
				if w < 2 {
					t.Errorf("Clip(_, %d) = %q cuts an escape at byte %d", n, got, i)
				}
				i += w - 1
			}
		}
		if !strings.HasPrefix(Escape(s), body) {
			t.Errorf("Clip(_, %d) = %q is not a prefix of the escaped text", n, got)
		}
	}
	if got := Clip("short", 10); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	if got := Clip("abcdef", 4); got != "abc…" {
		t.Errorf("Clip(abcdef, 4) = %q", got)
	}
	if got := Clip("\x1b[31m", 4); got != "…" {
		t.Errorf(`Clip(ESC[31m, 4) = %q, want only "…" (the 4-character escape does not fit with the ellipsis)`, got)
	}
}

func TestJSONKeepsMeaning(t *testing.T) {
	v := map[string]string{"intent": "a\u202eb\u009bc\x7fd\u2028e", "plain": "ok ✓", "esc": "\x1b[2J"}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	safe := JSON(raw)
	if actsOnTerminal(string(safe)) {
		t.Fatalf("JSON left a control character: %s", safe)
	}
	var back map[string]string
	if err := json.Unmarshal(safe, &back); err != nil {
		t.Fatalf("JSON broke the document: %v\n%s", err, safe)
	}
	for k := range v {
		if back[k] != v[k] {
			t.Errorf("%s: %q became %q", k, v[k], back[k])
		}
	}
	clean := []byte(`{"a":"b ✓"}`)
	if got := JSON(clean); !bytes.Equal(got, clean) {
		t.Errorf("clean JSON changed: %s", got)
	}
}

func TestWriterJoinsSplitRunesAndEscapes(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	in := []byte("é line\n\x1b]0;title\x07 ✓\n")
	// One byte per write splits every multi-byte character.
	for i := range in {
		if n, err := w.Write(in[i : i+1]); n != 1 || err != nil {
			t.Fatalf("write: %d %v", n, err)
		}
	}
	want := "é line\n\\x1b]0;title\\x07 ✓\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

func FuzzClip(f *testing.F) {
	for _, h := range hostile {
		f.Add(h, 7)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = n%100 + 1
		if n < 1 {
			n = -n + 1
		}
		got := Clip(s, n)
		if actsOnTerminal(got) {
			t.Fatalf("Clip(%q, %d) = %q acts on a terminal", s, n, got)
		}
		if utf8.RuneCountInString(got) > n {
			t.Fatalf("Clip(%q, %d) = %q is too long", s, n, got)
		}
		if !strings.HasPrefix(Escape(s), strings.TrimSuffix(got, "…")) {
			t.Fatalf("Clip(%q, %d) = %q is not a prefix of the escape", s, n, got)
		}
	})
}

func TestLogWriterKeepsOneEntryOneLine(t *testing.T) {
	var out bytes.Buffer
	w := NewLogWriter(&out)
	if _, err := w.Write([]byte("intent \"a\nFORGED ENTRY\x1b[2J\"\n")); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "intent \"a\\nFORGED ENTRY\\x1b[2J\"\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
