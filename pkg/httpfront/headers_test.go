package httpfront_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// TestHeadersMustAgreeWithTheBody: a POST whose Mcp-Method or Mcp-Name (SEP-2243) names
// another method or tool than its body is refused with HTTP 400 and -32020, before anything
// runs (an edge may have authorised the request by its headers); headers that agree, and no
// headers at all (2025-era clients send none), are served.
func TestHeadersMustAgreeWithTheBody(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid := g.open(nil)
	charge := func(id, order string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5,"order":"` + order + `"}}}`
	}
	for _, c := range []struct {
		name string
		h    hdr
	}{
		{"another tool", hdr{"Mcp-Method": "tools/call", "Mcp-Name": "read_report"}},
		{"another method", hdr{"Mcp-Method": "tools/list"}},
		{"a base64 name of another tool", hdr{"Mcp-Name": "=?base64?cmVhZF9yZXBvcnQ=?="}},
	} {
		r := g.mustPost(sid, c.h, charge("10", "o-1"))
		if r.status != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400 (%v)", c.name, r.status, r.raw)
		}
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(r.last(t)["error"], &e); err != nil || e.Code != -32020 || !strings.Contains(e.Message, "does not match") {
			t.Fatalf("%s: error %s, want -32020 naming the mismatch", c.name, r.last(t)["error"])
		}
		if string(r.last(t)["id"]) != "10" {
			t.Fatalf("%s: the refusal answers id %s, want 10", c.name, r.last(t)["id"])
		}
	}
	if fx := mcptest.Effects(g.effects); len(fx) != 0 {
		t.Fatalf("a refused request ran: %v", fx)
	}
	// The same call with agreeing headers, then without any, runs once and is replayed.
	for i, h := range []hdr{{"Mcp-Method": "tools/call", "Mcp-Name": "charge"}, nil} {
		r := g.mustPost(sid, h, charge(string(rune('1'+i))+"1", "o-1"))
		if r.status != http.StatusOK || r.last(t)["result"] == nil {
			t.Fatalf("call %d: status %d, %v", i, r.status, r.raw)
		}
	}
	if fx := mcptest.Effects(g.effects); len(fx) != 1 {
		t.Fatalf("effects %v, want the one charge", fx)
	}
	// An initialize is checked too, before a session is opened for it.
	if r := g.mustPost("", hdr{"Mcp-Method": "ping"}, initBody); r.status != http.StatusBadRequest || r.header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("initialize with a disagreeing Mcp-Method: status %d, session %q", r.status, r.header.Get("Mcp-Session-Id"))
	}
}
