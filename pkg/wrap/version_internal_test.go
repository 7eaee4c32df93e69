package wrap

import (
	"encoding/json"
	"testing"
)

// TestReadsInputRequiredByTheRequestsVersion: a call's own version (MCP 2026-07-28 has every
// request name it in _meta) says whether its client reads input_required; without one, the
// session's (none here: no server started); a version that is not a date is no version.
func TestReadsInputRequiredByTheRequestsVersion(t *testing.T) {
	p := &Proxy{}
	for params, want := range map[string]bool{
		`{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`: true,
		`{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2027-01-01"}}`: true,
		`{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}`: false,
		`{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"9999"}}`:       false,
		`{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-13-28"}}`: false,
		`{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}`:     false,
		`{"name":"x","_meta":{"protocolVersion":"2026-07-28"}}`:                         false,
		`{"name":"x"}`: false,
	} {
		if got := p.readsInputRequired(json.RawMessage(params)); got != want {
			t.Errorf("%s: %v, want %v", params, got, want)
		}
	}
}
