package probe

import (
	"encoding/json"
	"testing"
)

// BenchmarkFingerprint measures identifying one typical tool result (text + structured
// content + _meta), the per-answer cost of a probe.
func BenchmarkFingerprint(b *testing.B) {
	res := json.RawMessage(`{"content":[{"type":"text","text":"charged $49.00: ch_demo_0001"}],` +
		`"structuredContent":{"amount":4900,"charge_id":"ch_demo_0001","status":"succeeded"},` +
		`"_meta":{"effectfence/replayed":true,"effectfence/intent":"wrap:charge_card:0123"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := Fingerprint(res); err != nil {
			b.Fatal(err)
		}
	}
}
