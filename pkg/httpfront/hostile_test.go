package httpfront_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// Hostile or malformed messages on a session are refused before anything runs, and the
// session goes on: a JSON-RPC batch (MCP has none; each of its calls would escape the
// fence's one-message-one-answer framing), ids that are neither strings nor numbers, a
// tools/call sent as a notification (it could never learn its outcome), unknown session ids
// of any shape.
func TestHostileMessagesRunNothing(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid := g.open(nil)
	charge := call(1, "charge", `{"amount":5}`)
	for _, c := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"batch", "[" + charge + "," + call(2, "charge", `{"amount":5}`) + "]", http.StatusBadRequest, "-32600"},
		{"batch with spaces", " \n[" + charge + "]", http.StatusBadRequest, "-32600"},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`, http.StatusBadRequest, "-32600"},
		{"boolean id", `{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`, http.StatusBadRequest, "-32600"},
		{"no jsonrpc", `{"id":3,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`, http.StatusBadRequest, "-32600"},
		{"truncated", charge[:len(charge)-3], http.StatusBadRequest, "-32700"},
		{"call as a notification", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`, http.StatusAccepted, ""},
	} {
		r := g.mustPost(sid, nil, c.body)
		if r.status != c.status || (c.code != "" && (len(r.raw) == 0 || !strings.Contains(r.raw[0], `"code":`+c.code))) {
			t.Errorf("%s: status %d %v, want %d with code %s", c.name, r.status, r.raw, c.status, c.code)
		}
	}
	for _, id := range []string{strings.Repeat("a", 64<<10), sid + "x", strings.ToUpper(sid), "../" + sid, sid + "\u00e9"} {
		if r := g.mustPost(id, nil, charge); r.status != http.StatusNotFound {
			t.Errorf("session id %.40q: status %d, want 404", id, r.status)
		}
	}
	if n := len(mcptest.Effects(g.effects)); n != 0 {
		t.Fatalf("%d executions from refused messages, want 0", n)
	}
	if strings.Contains(g.log.String(), strings.Repeat("a", 64)) {
		t.Fatal("an unknown session id reached the log")
	}
	r := g.mustPost(sid, nil, call(9, "charge", `{"amount":5}`))
	if r.status != http.StatusOK || !strings.Contains(resultText(t, r.last(t)), "charged 5") {
		t.Fatalf("the session after hostile input: status %d %v", r.status, r.raw)
	}
	if n := len(mcptest.Effects(g.effects)); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// docs/gateway.md, --allow-origin: `*` allows any Origin (a listener behind a proxy that
// checks it); without it, a foreign Origin is refused even on a listener that is not on
// loopback, while a loopback Origin is allowed only on a loopback listener.
func TestOriginStarAndNonLoopbackListener(t *testing.T) {
	t.Parallel()
	star := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.AllowOrigins = []string{"*"} })
	if r := star.mustPost("", hdr{"Origin": "https://anything.example"}, initBody); r.status != http.StatusOK {
		t.Fatalf("--allow-origin '*': a foreign Origin got %d, want 200", r.status)
	}
	wide := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.Loopback = false })
	for origin, want := range map[string]int{"https://evil.example": http.StatusForbidden, "http://localhost:3000": http.StatusForbidden, "": http.StatusOK} {
		h := hdr{}
		if origin != "" {
			h["Origin"] = origin
		}
		if r := wide.mustPost("", h, initBody); r.status != want {
			t.Errorf("non-loopback listener, Origin %q: status %d, want %d", origin, r.status, want)
		}
	}
}

// docs/gateway.md, Endpoints: the statuses of /mcp besides a served message.
func TestEndpointStatuses(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid := g.open(nil)
	do := func(method string, h hdr) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, g.url, nil)
		req.Header.Set("Mcp-Session-Id", sid)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := do(http.MethodGet, hdr{"Accept": "application/json"}); r.StatusCode != http.StatusNotAcceptable {
		t.Errorf("GET without text/event-stream: status %d, want 406", r.StatusCode)
	}
	first, closeFirst := openGET(t, g, sid)
	openGET(t, g, sid) // a second GET stream takes over (200): the first ends
	defer time.AfterFunc(30*time.Second, closeFirst).Stop()
	if _, err := io.Copy(io.Discard, first.Body); err != nil {
		t.Errorf("the GET stream taken over: %v, want it ended by the gateway", err)
	}
	for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodHead, http.MethodOptions} {
		if r := do(m, nil); r.StatusCode != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "GET, POST, DELETE" {
			t.Errorf("%s: status %d, Allow %q; want 405 with GET, POST, DELETE", m, r.StatusCode, r.Header.Get("Allow"))
		}
	}
	if r := g.mustPost(sid, hdr{"MCP-Protocol-Version": "2025-06-18"}, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); r.status != http.StatusOK {
		t.Errorf("a version's form: status %d, want 200", r.status)
	}
}
