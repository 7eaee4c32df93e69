package canon

import (
	"encoding/json"
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

// validBenchInput is a tool result of about 2 KB: an array of small records.
var validBenchInput = []byte(`{"items":[` + strings.TrimSuffix(strings.Repeat(`{"id":12345,"name":"Widget \"deluxe\"","price":19.99,"tags":["a","b"],"ok":true,"note":null},`, 20), ",") + `]}`)

func BenchmarkValid(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if !Valid(validBenchInput) {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkValidEncodingJSON is encoding/json.Valid on the same input, for comparison.
func BenchmarkValidEncodingJSON(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if !json.Valid(validBenchInput) {
			b.Fatal("invalid")
		}
	}
}
