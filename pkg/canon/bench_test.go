package canon

import "testing"

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
