package httpfront_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
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
	// A body that gives its resource twice, or again in another case, names no one resource:
	// servers read the first, the last, or (encoding/json) either case. No Mcp-Name agrees
	// with it, so an edge that allowed mem://effects by the header cannot have the server read
	// mem://secret.
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":31,"method":"resources/read","params":{"uri":"mem://secret","uri":"mem://effects"}}`,
		`{"jsonrpc":"2.0","id":32,"method":"resources/read","params":{"uri":"mem://effects","URI":"mem://secret"}}`,
	} {
		r := g.mustPost(sid, hdr{"Mcp-Method": "resources/read", "Mcp-Name": "mem://effects"}, body)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.last(t)["error"]), "-32020") {
			t.Fatalf("%s with Mcp-Name mem://effects: status %d, %v; want 400 and -32020, not forwarded", body, r.status, r.raw)
		}
	}
	// An initialize is checked too, before a session is opened for it.
	if r := g.mustPost("", hdr{"Mcp-Method": "ping"}, initBody); r.status != http.StatusBadRequest || r.header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("initialize with a disagreeing Mcp-Method: status %d, session %q", r.status, r.header.Get("Mcp-Session-Id"))
	}
}

// TestParamHeadersMustAgreeWithTheArguments: a tools/call whose Mcp-Param-* headers (SEP-2243,
// mirrored from arguments the tool's inputSchema marks with x-mcp-header) disagree with its
// arguments is refused with 400 and -32020 before anything runs, judged by the real server's
// own tool listing (which the proxy reads itself when the client never listed the tools); a
// client speaking 2026-07-28 that leaves out the header of an argument it gives is refused;
// agreeing headers (base64 and numbers written otherwise included), and none at all from an
// older client, are served, once. Each refused call is told to Config.Observe as an invalid
// call of its tool (before 2026-12-07 the metrics were told nothing of them).
func TestParamHeadersMustAgreeWithTheArguments(t *testing.T) {
	t.Parallel()
	// Every tools/call is told to the metrics once, as the gateway wires them: the proxy's,
	// and those the front refuses itself (Config.Observe).
	var mu sync.Mutex
	var events []wrap.CallEvent
	observe := func(ev wrap.CallEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}
	g := newGW(t, func(c *httpfront.Config, o *wrap.Options) {
		o.Env = append(append([]string(nil), o.Env...), mcptest.EnvMode+"=headers")
		c.Observe, o.Observe = observe, observe
	})
	sid := g.open(nil)
	transfer := func(id, account, region string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"transfer","arguments":{"account":"` + account + `","to":{"region":"` + region + `"},"amount":5,"urgent":true}}}`
	}
	agree := hdr{"Mcp-Method": "tools/call", "Mcp-Name": "transfer", "Mcp-Param-Account": "alice", "Mcp-Param-Region": "eu", "Mcp-Param-Amount": "5.0", "Mcp-Param-Urgent": "true"}
	with := func(k, v string) hdr {
		h := hdr{}
		for a, b := range agree {
			h[a] = b
		}
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
		return h
	}
	for _, c := range []struct {
		name string
		h    hdr
		want string
	}{
		// First, before any tools/list: the proxy lists the server's tools to judge.
		{"another account", with("Mcp-Param-Account", "bob"), "Mcp-Param-Account does not match account"},
		{"another nested region", with("Mcp-Param-Region", "=?base64?dXM=?="), "Mcp-Param-Region does not match to.region"},
		{"another amount", with("Mcp-Param-Amount", "50"), "Mcp-Param-Amount does not match amount"},
		{"a 2026-07-28 client without a header", with("MCP-Protocol-Version", "2026-07-28").without("Mcp-Param-Urgent"), "Mcp-Param-Urgent is missing"},
	} {
		r := g.mustPost(sid, c.h, transfer("10", "alice", "eu"))
		if r.status != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400 (%v)", c.name, r.status, r.raw)
		}
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(r.last(t)["error"], &e); err != nil || e.Code != -32020 || !strings.Contains(e.Message, c.want) || string(r.last(t)["id"]) != "10" {
			t.Fatalf("%s: %v, want -32020 under id 10 saying %q", c.name, r.raw, c.want)
		}
	}
	if fx := mcptest.Effects(g.effects); len(fx) != 0 {
		t.Fatalf("a refused request ran: %v", fx)
	}
	// Each refusal was counted as an invalid call of its tool (answered after it was told).
	mu.Lock()
	counted := append([]wrap.CallEvent(nil), events...)
	mu.Unlock()
	if len(counted) != 4 {
		t.Fatalf("the metrics were told of %d calls, want the 4 refused: %+v", len(counted), counted)
	}
	for _, ev := range counted {
		if ev.Outcome != "invalid" || ev.Tool != "transfer" || ev.Code != "" {
			t.Fatalf("a refused call was told as %+v, want outcome invalid of tool transfer", ev)
		}
	}
	// Agreeing headers run the call; the same call from an older client without headers is
	// its duplicate and is replayed.
	for i, h := range []hdr{agree, with("Mcp-Param-Region", "=?base64?ZXU=?="), nil} {
		r := g.mustPost(sid, h, transfer(string(rune('1'+i))+"1", "alice", "eu"))
		if r.status != http.StatusOK || r.last(t)["result"] == nil {
			t.Fatalf("call %d: status %d, %v", i, r.status, r.raw)
		}
	}
	if fx := mcptest.Effects(g.effects); len(fx) != 1 || !strings.Contains(fx[0], "account=alice region=eu amount=5") {
		t.Fatalf("effects %v, want the one transfer", fx)
	}
	// A header the tool does not declare is not the gateway's to check.
	if r := g.mustPost(sid, hdr{"Mcp-Param-Other": "x"}, transfer("20", "carol", "us")); r.status != http.StatusOK || r.last(t)["result"] == nil {
		t.Fatalf("an undeclared header: status %d, %v", r.status, r.raw)
	}
}

func (h hdr) without(k string) hdr {
	out := hdr{}
	for a, b := range h {
		if a != k {
			out[a] = b
		}
	}
	return out
}

// TestParamHeadersUncheckableAreRefused: when the server's tool list cannot be read (mcptest's
// "dielist" mode exits on tools/list), a tools/call carrying Mcp-Param-* headers is refused
// with -32020 rather than served unchecked, and nothing runs.
func TestParamHeadersUncheckableAreRefused(t *testing.T) {
	t.Parallel()
	g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) {
		o.Env = append(append([]string(nil), o.Env...), mcptest.EnvMode+"=dielist")
		o.Wait = 3 * time.Second
	})
	sid := g.open(nil)
	r := g.mustPost(sid, hdr{"Mcp-Param-Account": "alice"}, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`)
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if r.status != http.StatusBadRequest || json.Unmarshal(r.last(t)["error"], &e) != nil || e.Code != -32020 || !strings.Contains(e.Message, "cannot be checked") {
		t.Fatalf("a call with Mcp-Param-* headers and no tool list: status %d %v, want 400 -32020", r.status, r.raw)
	}
	if fx := mcptest.Effects(g.effects); len(fx) != 0 {
		t.Fatalf("it ran: %v", fx)
	}
}
