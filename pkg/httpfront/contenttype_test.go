package httpfront_test

import (
	"net/http"
	"strings"
	"testing"
)

// A browser's POST must carry Content-Type application/json, as MCP's SDK servers require of
// every POST (the TypeScript SDK's and go-sdk's answer 415): a page may send a body of another
// type (text/plain, a form, a Blob without a type) to any origin with no CORS preflight, so a
// page of a loopback origin (allowed on a loopback listener: http://localhost:3000) could open
// sessions at will, each with its server. Only a request that carries Origin, which browsers
// send with every POST, is held to it: a client without one (curl, scripts) is served whatever
// its Content-Type, as before. Nothing of a refused request starts.
func TestBrowserPostMustBeJSON(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	const page = "Origin: http://localhost:3000\r\n"
	for _, head := range []string{
		page + "Content-Type: text/plain;charset=UTF-8\r\n",
		page, // a Blob without a type: no Content-Type
		page + "Content-Type: application/x-www-form-urlencoded\r\n",
		page + "Content-Type: multipart/form-data; boundary=x\r\n",
		page + "Content-Type: text/plain; a=application/json\r\n",
		page + "Content-Type: application/json-seq\r\n",
	} {
		if code, body := rawDo(t, g.url, "POST", head, initBody); code != http.StatusUnsupportedMediaType || !strings.Contains(body, "application/json") {
			t.Errorf("%q: %d %s; want 415 naming application/json", head, code, body)
		}
	}
	g.mu.Lock()
	made := len(g.proxies)
	g.mu.Unlock()
	if made != 0 {
		t.Fatalf("refused initializes made %d sessions", made)
	}
	for _, head := range []string{
		page + "Content-Type: Application/JSON; charset=utf-8\r\n", // passed a preflight at a proxy in front
		"Content-Type: text/plain\r\n",
		"",
	} {
		if code, body := rawDo(t, g.url, "POST", head, initBody); code != http.StatusOK || !strings.Contains(body, `"result"`) {
			t.Errorf("%q: %d %s; want the initialize answered", head, code, body)
		}
	}
}
