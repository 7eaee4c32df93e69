package safetext

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// hostile holds what an agent can put in an intent, a reason or an answer to attack the
// terminal of the operator who reads it.
var hostile = []string{
	"\x1b]0;pwned\x07",          // OSC: set the window title
	"\x1b[2J\x1b[H",             // clear the screen, cursor home
	"\x1b[32mall clear\x1b[0m",  // fake green verdict
	"ok\rFORGED",                // carriage return overwrites the line
	"\u009b2J",                  // C1 CSI: clear screen on terminals that honour 8-bit controls
	"\u009d0;t\u009c",           // C1 OSC ... ST
	"abc\u202edcba",             // RLO: reorders what follows
	"\u2066x\u2069",             // isolates
	"a\u200fb\u061c",            // bidi marks
	"line\u2028sep",             // line separator
	"bad\xffutf8\xc3",           // not UTF-8
	"pay:\u200b1",               // zero-width space: looks like pay:1
	"pay:1\U000e0031\U000e007f", // tag characters: drawn as nothing
	"\x7fdel\x00nul\bbs",        // DEL, NUL, backspace
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

// invisible holds characters a terminal draws as nothing (or as a blank), one of each kind
// the package doc names, with the escape Escape must write for it. Listed by hand, not read
// from the tables unsafe uses, so the test does not just repeat the code.
var invisible = []struct {
	r    rune
	want string
}{
	{0x00ad, `\u00ad`},      // soft hyphen
	{0x034f, `\u034f`},      // combining grapheme joiner
	{0x061c, `\u061c`},      // Arabic letter mark
	{0x115f, `\u115f`},      // Hangul choseong filler
	{0x1160, `\u1160`},      // Hangul jungseong filler
	{0x17b4, `\u17b4`},      // Khmer vowel inherent aq
	{0x180b, `\u180b`},      // Mongolian free variation selector one
	{0x180e, `\u180e`},      // Mongolian vowel separator
	{0x200b, `\u200b`},      // zero width space
	{0x200c, `\u200c`},      // zero width non-joiner
	{0x200d, `\u200d`},      // zero width joiner
	{0x200e, `\u200e`},      // left-to-right mark
	{0x202e, `\u202e`},      // right-to-left override
	{0x2060, `\u2060`},      // word joiner
	{0x2061, `\u2061`},      // function application
	{0x2064, `\u2064`},      // invisible plus
	{0x2065, `\u2065`},      // unassigned, reserved default-ignorable
	{0x2069, `\u2069`},      // pop directional isolate
	{0x206a, `\u206a`},      // inhibit symmetric swapping
	{0x206f, `\u206f`},      // nominal digit shapes
	{0x3164, `\u3164`},      // Hangul filler
	{0xfe00, `\ufe00`},      // variation selector-1
	{0xfe0f, `\ufe0f`},      // variation selector-16 (emoji presentation)
	{0xfeff, `\ufeff`},      // zero width no-break space (BOM)
	{0xffa0, `\uffa0`},      // halfwidth Hangul filler
	{0xfff0, `\ufff0`},      // unassigned, reserved default-ignorable
	{0xfff9, `\ufff9`},      // interlinear annotation anchor
	{0xfffb, `\ufffb`},      // interlinear annotation terminator
	{0x1bca0, `\U0001bca0`}, // shorthand format letter overlap
	{0x1d173, `\U0001d173`}, // musical symbol begin beam
	{0xe0000, `\U000e0000`}, // unassigned, reserved default-ignorable
	{0xe0001, `\U000e0001`}, // language tag
	{0xe0020, `\U000e0020`}, // tag space
	{0xe0041, `\U000e0041`}, // tag latin capital letter a
	{0xe007f, `\U000e007f`}, // cancel tag
	{0xe0100, `\U000e0100`}, // variation selector-17
	{0xe01ef, `\U000e01ef`}, // variation selector-256
	{0xe0fff, `\U000e0fff`}, // unassigned, reserved default-ignorable
}

// TestEscapeShowsInvisibleCharacters: two intent ids that differ only by a character drawn
// as nothing ("pay:1" and "pay:\u200b1") must not look the same once escaped, in one line, in
// multi-line text, through a Writer, and in a clipped cell.
func TestEscapeShowsInvisibleCharacters(t *testing.T) {
	for _, c := range invisible {
		in := "pay:" + string(c.r) + "1"
		want := "pay:" + c.want + "1"
		if got := Escape(in); got != want {
			t.Errorf("Escape(%+q) = %q, want %q", in, got, want)
		}
		if got := EscapeText(in + "\n"); got != want+"\n" {
			t.Errorf("EscapeText(%+q) = %q, want %q", in, got, want+"\n")
		}
		var out bytes.Buffer
		if _, err := NewWriter(&out).Write([]byte(in)); err != nil || out.String() != want {
			t.Errorf("Writer(%+q) wrote %q (%v), want %q", in, out.String(), err, want)
		}
		if got := Clip(in, 100); got != want {
			t.Errorf("Clip(%+q, 100) = %q, want %q", in, got, want)
		}
		if Escape(in) == Escape("pay:1") {
			t.Errorf("%+q and \"pay:1\" look the same escaped", in)
		}
	}
}

// TestEscapeCoversEveryFormatCharacter walks the whole code space: every Cf character and
// every variation selector is escaped, and an escaped string never holds one.
func TestEscapeCoversEveryFormatCharacter(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue // surrogates are not characters; UTF-8 cannot carry them
		}
		if !unicode.Is(unicode.Cf, r) && !unicode.Is(unicode.Variation_Selector, r) {
			continue
		}
		got := Escape(string(r))
		if !strings.HasPrefix(got, `\u`) && !strings.HasPrefix(got, `\U`) {
			t.Errorf("Escape(%U) = %q: not escaped", r, got)
		}
		if strings.ContainsRune(got, r) {
			t.Errorf("Escape(%U) = %q still holds it", r, got)
		}
	}
}

// TestEscapeKeepsWhatIsDrawn: ordinary text, visible marks and emoji without a joiner or a
// selector are shown as they are; a joined emoji shows its joiners (ids over pretty emoji).
func TestEscapeKeepsWhatIsDrawn(t *testing.T) {
	for _, s := range []string{"café", "e\u0301", "日本語", "עברית", "العربية", "👍", "a b\u00a0c", "🇫🇷"} {
		if got := Escape(s); got != s {
			t.Errorf("Escape(%+q) = %q, want it unchanged", s, got)
		}
	}
	if got, want := Escape("👩\u200d💻 ❤\ufe0f"), `👩\u200d💻 ❤\ufe0f`; got != want {
		t.Errorf("Escape(emoji sequences) = %q, want %q", got, want)
	}
}

// TestClipKeepsLongEscapesWhole: an escape beyond U+FFFF is ten characters long; Clip never
// cuts it, and never leaves a four-digit \u that would read as another character.
func TestClipKeepsLongEscapesWhole(t *testing.T) {
	s := "ab\U000e0041cd\u200bef"
	// Escaped: a b \U000e0041 c d \u200b e f
	want := map[int]string{1: "…", 2: "a…", 3: "ab…", 4: "ab…", 12: "ab…", 13: `ab\U000e0041…`,
		14: `ab\U000e0041c…`, 15: `ab\U000e0041cd…`, 20: `ab\U000e0041cd…`, 21: `ab\U000e0041cd\u200b…`}
	for n := 1; n <= 30; n++ {
		got := Clip(s, n)
		if w, ok := want[n]; ok && got != w {
			t.Errorf("Clip(_, %d) = %q, want %q", n, got, w)
		}
		if utf8.RuneCountInString(got) > n {
			t.Errorf("Clip(_, %d) = %q: longer than %d", n, got, n)
		}
		if body := strings.TrimSuffix(got, "…"); !strings.HasPrefix(Escape(s), body) {
			t.Errorf("Clip(_, %d) = %q is not a prefix of the escaped text", n, got)
		}
	}
	if got, want := Clip(s, 100), `ab\U000e0041cd\u200bef`; got != want {
		t.Errorf("Clip(_, 100) = %q, want %q", got, want)
	}
}

// TestJSONEscapesInvisibleCharacters: every invisible character leaves the JSON text as an
// escape (beyond U+FFFF, a surrogate pair, the only form JSON has), and the document still
// decodes to exactly what was encoded.
func TestJSONEscapesInvisibleCharacters(t *testing.T) {
	for _, c := range invisible {
		v := map[string]string{"intent": "pay:" + string(c.r) + "1"}
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		safe := JSON(raw)
		if bytes.ContainsRune(safe, c.r) {
			t.Errorf("JSON(%+q) = %s still holds %U", v["intent"], safe, c.r)
		}
		var back map[string]string
		if err := json.Unmarshal(safe, &back); err != nil || back["intent"] != v["intent"] {
			t.Errorf("JSON(%+q) = %s decodes to %+q (%v)", v["intent"], safe, back["intent"], err)
		}
	}
	raw, _ := json.Marshal("pay:\U000e0041\u200b1")
	if got, want := string(JSON(raw)), `"pay:\udb40\udc41\u200b1"`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}

// TestEscapeExactTellsIdsApart: an id holding U+200B and one holding the six characters
// \u200b are shown apart by EscapeExact (Escape showed both as pay:\u200b1: found in review,
// 2026-12-05), and what it shows, pasted into bash's $'…', is the id again.
func TestEscapeExactTellsIdsApart(t *testing.T) {
	ids := []string{"pay:\u200b1", `pay:\u200b1`, `a\x1b`, "a\x1b", `c:\dir\n`, `x\\`, `x\`, "\U000e0031", `\U000e0031`}
	seen := map[string]string{}
	for _, id := range ids {
		shown := EscapeExact(id)
		if other, dup := seen[shown]; dup {
			t.Errorf("%q and %q are both shown %s", id, other, shown)
		}
		seen[shown] = id
		if c := ClipExact(id, 1000); c != shown {
			t.Errorf("ClipExact(%q) = %s, EscapeExact %s", id, c, shown)
		}
	}
	if got := ClipExact(`ab\\cd`, 4); got != `ab\\…` && got != `ab…` {
		t.Errorf("ClipExact cut inside an escaped backslash: %s", got)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash to paste into")
	}
	for _, id := range ids {
		out, err := exec.Command("bash", "-c", `printf %s $'`+EscapeExact(id)+`'`).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != id {
			t.Errorf("id %q is shown %s, which $'…' reads as %q", id, EscapeExact(id), out)
		}
	}
}
