package canon

import (
	"testing"
	"unicode/utf8"
)

// appendStringByRune is AppendString written rune by rune, the plain reading of RFC 8785's
// string rule: the reference the run-copying AppendString must match on every input, valid
// UTF-8 or not.
func appendStringByRune(b []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"', r == '\\':
			b = append(b, '\\', byte(r))
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

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "\b\f\n\r\t\x00\x1f\x7f", "é€😀", "\xff", "a\xe2\x82", "\xed\xa0\x80", "mixed é \"x\" \n end",
		"eight by\"tes then more", "0123456789abcdef\\", "sixteen plain ch\x1f", "12345678é12345678", "abcdefgh\x7f\x20!~[]^_`{|}",
		// Each length below, at and past eight, with the one byte to escape last.
		"\"", "ab\\", "seven\n", "1234567\"", "12345678\x01", "nine char\"", "1234567\xff", "123456789abcdef\xc3\xa9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, want := AppendString([]byte("pre"), s), appendStringByRune([]byte("pre"), s)
		if string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %q, want %q", s, got, want)
		}
	})
}
