package canon

import (
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

func BenchmarkJSONSmall(b *testing.B) {
	in := []byte(`{"amount":4900,"currency":"usd","to":{"name":"Ada","card":"tok_123"}}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := JSON(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprintSmall(b *testing.B) {
	in := []byte(`{"amount":4900,"currency":"usd"}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Fingerprint("charge_card", in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLibrarySmall is the RFC 8785 library on the same input, for comparison.
func BenchmarkLibrarySmall(b *testing.B) {
	in := []byte(`{"amount":4900,"currency":"usd","to":{"name":"Ada","card":"tok_123"}}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := jcs.Transform(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONText: arguments carrying a paragraph of text, as a tool call's often do.
func BenchmarkJSONText(b *testing.B) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	in := []byte(`{"body":"` + text + `","to":"ada@example.com"}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := JSON(in); err != nil {
			b.Fatal(err)
		}
	}
}
