package httpfront_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// rawDo sends one request over a new TCP connection exactly as written (head is the header
// lines after the request line, each ending in \r\n), so a test controls what a client library
// would normalise: a header's spelling and case, its repetition, padding. It returns the
// status and the body (not an event stream's, which lasts: the connection is closed instead).
func rawDo(t *testing.T, gwURL, method, head, body string) (int, string) {
	t.Helper()
	u, err := url.Parse(gwURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: %d\r\n%s\r\n%s", method, u.Path, u.Host, len(body), head, body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		conn.Close() // before the body's Close, which would read it to its end
		return resp.StatusCode, ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// docs/gateway.md, Endpoints and "Who calls is part of the intent": a session belongs to the
// principal that opened it, and another principal's request naming it gets 404 whatever the
// method, however the headers are spelled: the names in any case, values padded with spaces
// or tabs, Mcp-Session-Id sent twice (the victim's first or second), or the session's id
// after its DELETE. Bob's identical call, in his own session, is his own action (it runs, it
// is not handed alice's receipt), and nothing bob sent ran in alice's session.
func TestPrincipalIsolationHeaderSpellings(t *testing.T) {
	t.Parallel()
	alice, bob := "alice-token-0123456789", "bob-token-0123456789ab"
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) {
		c.Keys = map[string]string{alice: "alice", bob: "bob"}
	})
	ah, bh := hdr{"Authorization": "Bearer " + alice}, hdr{"Authorization": "Bearer " + bob}
	sid := g.open(ah)
	if r := g.mustPost(sid, ah, call(2, "charge", `{"amount":7}`)); !strings.Contains(resultText(t, r.last(t)), "charged 7") {
		t.Fatalf("alice's charge: %v", r.raw)
	}
	bobSid := g.open(bh)

	charge := call(3, "charge", `{"amount":7}`)
	post := "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
	sse := "Accept: text/event-stream\r\n"
	for _, c := range []struct{ name, method, head, body string }{
		{"lower-case names", "POST", post + "authorization: bearer " + bob + "\r\nmcp-session-id: " + sid + "\r\n", charge},
		{"upper-case names", "POST", post + "AUTHORIZATION: BEARER  " + bob + "\r\nMCP-SESSION-ID: " + sid + "\r\n", charge},
		{"padded values", "POST", post + "Authorization: \t Bearer " + bob + " \t\r\nMcp-Session-Id: \t " + sid + " \t\r\n", charge},
		{"alice's id first, bob's second", "POST", post + "Authorization: Bearer " + bob + "\r\nMcp-Session-Id: " + sid + "\r\nMcp-Session-Id: " + bobSid + "\r\n", charge},
		{"bob's id first, alice's second: bob's own session", "GET", sse + "Authorization: Bearer " + bob + "\r\nMcp-Session-Id: " + bobSid + "\r\nMcp-Session-Id: " + sid + "\r\n", ""},
		{"GET with Last-Event-ID", "GET", sse + "Authorization: Bearer " + bob + "\r\nMcp-Session-Id: " + sid + "\r\nLast-Event-ID: 0\r\n", ""},
		{"DELETE, padded", "DELETE", "Authorization: Bearer " + bob + "\r\nMcp-Session-Id:  " + sid + "\r\n", ""},
		{"initialize naming alice's session", "POST", post + "Authorization: Bearer " + bob + "\r\nMcp-Session-Id: " + sid + "\r\n", initBody},
	} {
		code, body := rawDo(t, g.url, c.method, c.head, c.body)
		want := http.StatusNotFound
		if strings.HasPrefix(c.name, "bob's id first") {
			want = http.StatusOK // his own session's GET stream
		}
		if code != want {
			t.Errorf("%s: status %d %.200s, want %d", c.name, code, body, want)
		}
		if want == http.StatusNotFound && strings.Contains(body, "charged") {
			t.Errorf("%s: bob was handed a charge: %.200s", c.name, body)
		}
	}
	if n := len(mcptest.Effects(g.effects)); n != 1 {
		t.Fatalf("%d executions after bob's requests naming alice's session, want alice's 1", n)
	}
	// Bob's identical call in his own session is his action: it runs, not a replay of alice's.
	r := g.mustPost(bobSid, bh, call(4, "charge", `{"amount":7}`))
	if text := resultText(t, r.last(t)); !strings.Contains(text, "charged 7") || strings.Contains(r.raw[len(r.raw)-1], "effectfence/replayed") {
		t.Fatalf("bob's identical call: %v, want his own execution", r.raw)
	}
	if n := len(mcptest.Effects(g.effects)); n != 2 {
		t.Fatalf("%d executions, want 2 (alice's and bob's)", n)
	}
	// Alice's session is intact, and after her DELETE its id is nobody's, hers included.
	if r := g.mustPost(sid, ah, `{"jsonrpc":"2.0","id":5,"method":"ping"}`); r.status != http.StatusOK {
		t.Fatalf("alice's session after bob's requests: status %d %v", r.status, r.raw)
	}
	if code, body := rawDo(t, g.url, "DELETE", "Authorization: Bearer "+alice+"\r\nMcp-Session-Id: "+sid+"\r\n", ""); code != http.StatusOK {
		t.Fatalf("alice's DELETE: status %d %.200s", code, body)
	}
	for _, who := range []string{alice, bob} {
		for _, m := range []struct{ method, head, body string }{
			{"POST", post, charge}, {"GET", sse, ""}, {"DELETE", "", ""},
		} {
			code, body := rawDo(t, g.url, m.method, m.head+"Authorization: Bearer "+who+"\r\nMcp-Session-Id: "+sid+"\r\n", m.body)
			if code != http.StatusNotFound {
				t.Errorf("%s of alice's deleted session by %.5s: status %d %.200s, want 404", m.method, who, code, body)
			}
		}
	}
	if n := len(mcptest.Effects(g.effects)); n != 2 {
		t.Fatalf("%d executions after the deleted session's id was reused, want 2", n)
	}
}

// docs/gateway.md, --pass-auth: the principal is a hash of the client's credentials, so only
// the same token (its scheme's name in any case, any number of spaces before it) reaches a
// session it opened. No header, an empty one, the scheme without a token, another scheme with
// the same token, a longer token, or an empty Authorization sent before the right one (the
// first is the one read, for the principal and for the upstream alike) is another caller: 404.
func TestPassAuthPrincipalIsolation(t *testing.T) {
	t.Parallel()
	tok := "alice-token-0123456789"
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.PassAuth = true })
	sid := g.open(hdr{"Authorization": "Bearer " + tok})
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	base := "Accept: application/json\r\nContent-Type: application/json\r\nMcp-Session-Id: " + sid + "\r\n"
	for _, c := range []struct {
		authz string // header lines
		want  int
	}{
		{"", http.StatusNotFound},
		{"Authorization:\r\n", http.StatusNotFound},
		{"Authorization: Bearer\r\n", http.StatusNotFound},
		{"Authorization: Bearer \r\n", http.StatusNotFound},
		{"Authorization: Basic " + tok + "\r\n", http.StatusNotFound},
		{"Authorization: Bearer " + tok + "x\r\n", http.StatusNotFound},
		{"Authorization: Bearer\t" + tok + "\r\n", http.StatusNotFound}, // a tab is not the scheme's separator
		{"Authorization:\r\nAuthorization: Bearer " + tok + "\r\n", http.StatusNotFound},
		{"authorization: bEARER   " + tok + " \r\n", http.StatusOK},
		{"Authorization: Bearer " + tok + "\r\nAuthorization: Bearer someone-else\r\n", http.StatusOK},
	} {
		if code, body := rawDo(t, g.url, "POST", base+c.authz, ping); code != c.want {
			t.Errorf("Authorization lines %q: status %d %.200s, want %d", strings.ReplaceAll(c.authz, tok, "<token>"), code, body, c.want)
		}
	}
}
