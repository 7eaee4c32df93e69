package fence

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
)

// TestNonceHex: a nonce's digits are hex.EncodeToString's, for random bytes and the extremes.
func TestNonceHex(t *testing.T) {
	cases := [][16]byte{{}, {0: 0xff, 15: 0xff}, {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10}}
	for i := 0; i < 1000; i++ {
		var b [16]byte
		_, _ = rand.Read(b[:])
		cases = append(cases, b)
	}
	for _, b := range cases {
		if h := nonceHex(&b); string(h[:]) != hex.EncodeToString(b[:]) {
			t.Fatalf("nonceHex(%x) = %s", b, h)
		}
	}
	if n := newNonce(); len(n) != 32 || strings.Trim(n, "0123456789abcdef") != "" {
		t.Errorf("newNonce() = %q; want 32 lowercase hex digits", n)
	}
}
