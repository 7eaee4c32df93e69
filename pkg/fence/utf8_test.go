package fence

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestValidUTF8 checks the word-at-a-time fast path against the library: a non-ASCII byte, valid
// or not, at every offset of strings around the eight-byte word size.
func TestValidUTF8(t *testing.T) {
	inserts := []string{"é", "\xff", "\xc3", "€", "\xe2\x82", "😀", "\xed\xa0\x80"}
	for n := 0; n <= 20; n++ {
		base := strings.Repeat("a", n)
		if !validUTF8(base) {
			t.Fatalf("validUTF8(%q) = false", base)
		}
		for i := 0; i <= n; i++ {
			for _, ins := range inserts {
				s := base[:i] + ins + base[i:]
				if got, want := validUTF8(s), utf8.ValidString(s); got != want {
					t.Fatalf("validUTF8(%q) = %v, want %v", s, got, want)
				}
			}
		}
	}
}
