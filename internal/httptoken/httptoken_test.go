package httptoken

import "testing"

func TestBadByte(t *testing.T) {
	for s, want := range map[string]int{
		"X-Token": -1, "a!#$%&'*+-.^_`|~9": -1, "": -1,
		"X(Token)": 1, "X Token": 1, "é": 0, "X:": 1, "X\x7f": 1, "X\r\n": 1,
	} {
		if got := BadByte(s); got != want {
			t.Errorf("BadByte(%q) = %d, want %d", s, got, want)
		}
	}
	if Valid("") || !Valid("Mcp-Param-Region") || Valid("a b") {
		t.Error("Valid: want false for empty and for a space, true for a header name")
	}
}
