package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rawRequest sends one request over a new connection exactly as written (head: the header
// lines after Host, each ending in \r\n) and returns the status and body; 0 when the gateway
// closed the connection without an answer.
func rawRequest(t *testing.T, gwURL, method, head, body string) (int, string) {
	t.Helper()
	code, b, _ := rawRequestWithHeader(t, gwURL, method, head, body, "")
	return code, b
}

// rawRequestWithHeader is rawRequest that also returns the answer's header name ("": none).
func rawRequestWithHeader(t *testing.T, gwURL, method, head, body, name string) (int, string, string) {
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
	go func() { // written apart from the read: a refused head is answered before it is all sent
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: %d\r\n%s\r\n%s", method, u.Path, u.Host, len(body), head, body)
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err.Error(), ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	v := ""
	if name != "" {
		v = resp.Header.Get(name)
	}
	return resp.StatusCode, string(b), v
}

// Hostile header sizes and session ids, against the real binary behind API keys: a header
// section past the HTTP server's bound (one value of 2 MiB, or 1.5 MiB in thousands of
// headers) is refused with 431 before anything is read of it; thousands of small headers
// under the bound are served; an Mcp-Session-Id of any length or bytes (control characters,
// NUL, bytes outside ASCII, a folded line, the real id with something added) reaches no
// session: 400 or 404, never a call run, never a 5xx, and none of it in the log. The gateway
// and the session go on serving.
func TestGatewayHostileHeaders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	g := startGateway(t, "--ledger", filepath.Join(dir, "l.db"), "--listen", "127.0.0.1:0", "--api-keys", keysFile(t),
		"--", effectfence(t), "demo-server", "--latency", "1ms", "--effects", effects)
	sid := g.initializeAs(t, aliceToken)
	auth := "Authorization: Bearer " + aliceToken + "\r\nContent-Type: application/json\r\nAccept: application/json\r\n"
	charge := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_h"}}}`

	many := func(n, size int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "X-Pad-%d: %s\r\n", i, strings.Repeat("p", size))
		}
		return b.String()
	}
	for name, c := range map[string]struct {
		head string
		want int
	}{
		"one value of 2 MiB":             {"X-Pad: " + strings.Repeat("p", 2<<20) + "\r\n", http.StatusRequestHeaderFieldsTooLarge},
		"1.5 MiB in 3000 headers":        {many(3000, 512), http.StatusRequestHeaderFieldsTooLarge},
		"4000 small headers":             {many(4000, 16), http.StatusOK},
		"an Mcp-Param header of 900 KiB": {"Mcp-Param-Customer: " + strings.Repeat("c", 900<<10) + "\r\n", http.StatusOK},
	} {
		code, body := rawRequest(t, g.url, "POST", auth+"Mcp-Session-Id: "+sid+"\r\n"+c.head, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
		if code != c.want {
			t.Errorf("%s: status %d %.200s, want %d", name, code, body, c.want)
		}
	}

	for _, id := range []string{
		"x", strings.Repeat("a", 900<<10), "\x01" + sid, sid + "\x7f", sid + "\x00", "\x00", sid[:16] + "\t" + sid[16:],
		"\xff\xfe" + sid, strings.ToUpper(sid), sid + "0", sid[:len(sid)-1], sid + "\r\n " + sid,
	} {
		code, body := rawRequest(t, g.url, "POST", auth+"Mcp-Session-Id: "+id+"\r\n", charge)
		if code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("Mcp-Session-Id %.40q: status %d %.200s, want 400 or 404", id, code, body)
		}
	}
	if n := effectsOf(t, effects); n != 0 {
		t.Fatalf("%d charges ran from requests naming no session, want 0", n)
	}
	if l := g.logText(); strings.Contains(l, strings.Repeat("a", 64)) || strings.Contains(l, strings.Repeat("p", 64)) || strings.Contains(l, strings.Repeat("c", 64)) {
		t.Fatalf("a hostile header reached the log:\n%.2000s", l)
	}
	if code, body := rawRequest(t, g.url, "POST", auth+"Mcp-Session-Id: "+sid+"\r\n", charge); code != http.StatusOK || !strings.Contains(body, `"result"`) || effectsOf(t, effects) != 1 {
		t.Fatalf("the session after the hostile headers: %d %.300s, %d charges", code, body, effectsOf(t, effects))
	}
}

// initializeAs opens a session with the bearer token and returns its id.
func (g *gatewayProc) initializeAs(t *testing.T, token string) string {
	t.Helper()
	resp, body := g.post(t, token, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	g.post(t, token, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}
