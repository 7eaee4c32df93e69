package wrap_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// TestUnspokenRevision: a request names a revision wrap does not speak only in its _meta's
// "io.modelcontextprotocol/protocolVersion" (the last member so named, as JSON parsers keep),
// and one that is not of the form YYYY-MM-DD is unspoken and echoed by no error.
func TestUnspokenRevision(t *testing.T) {
	long := `"` + strings.Repeat("9", 1<<16) + `"`
	for _, c := range []struct {
		params   string
		revision string
		unspoken bool
	}{
		{``, "", false},
		{`[]`, "", false},
		{`{}`, "", false},
		{`{"_meta":[]}`, "", false},
		{`{"_meta":{}}`, "", false},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}`, "", false},
		{`{"_meta":{"io.modelcontextprotocol/protocolversion":"2026-07-28"}}`, "", false},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, "2026-07-28", true},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, "2026-07-28", true},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2024-10-07"}}`, "2024-10-07", true},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":7}}`, "", true},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":null}}`, "", true},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-13-45"}}`, "", true},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":` + long + `}}`, "", true},
	} {
		revision, unspoken := wrap.UnspokenRevision(json.RawMessage(c.params))
		if revision != c.revision || unspoken != c.unspoken {
			t.Errorf("%.80s: got %q %v, want %q %v", c.params, revision, unspoken, c.revision, c.unspoken)
		}
	}
}

// TestRevisionError: MCP's -32022 under the request's id, its data listing wrap.Revisions as
// "supported" and echoing "requested" when it was readable.
func TestRevisionError(t *testing.T) {
	for _, c := range []struct{ revision, data string }{
		{"2026-07-28", `{"supported":["2025-11-25","2025-06-18","2025-03-26","2024-11-05"],"requested":"2026-07-28"}`},
		{"", `{"supported":["2025-11-25","2025-06-18","2025-03-26","2024-11-05"]}`},
	} {
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   struct {
				Code    int             `json:"code"`
				Message string          `json:"message"`
				Data    json.RawMessage `json:"data"`
			} `json:"error"`
		}
		out := wrap.RevisionError(json.RawMessage(`"server-discover-probe-1"`), c.revision)
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if m.JSONRPC != "2.0" || string(m.ID) != `"server-discover-probe-1"` || m.Error.Code != -32022 || string(m.Error.Data) != c.data ||
			!strings.Contains(m.Error.Message, "2025-11-25") || !strings.Contains(m.Error.Message, "initialize") {
			t.Fatalf("got %s", out)
		}
	}
}
