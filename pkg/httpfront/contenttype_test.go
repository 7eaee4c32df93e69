package httpfront_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A browser's POST must carry Content-Type application/json, as MCP's SDK servers require of
// every POST (the TypeScript SDK's and go-sdk's answer 415): a page may send a body of another
// type (text/plain, a form, a Blob without a type) to any origin with no CORS preflight, so a
// page of a loopback origin (allowed on a loopback listener: http://localhost:3000) could open
// sessions at will, each with its server. Nothing of a refused request starts.
func TestBrowserPostMustBeJSON(t *testing.T) {
	t.Parallel()
	postMustBeJSON(t, "Origin: http://localhost:3000\r\n")
}

// So must every other POST: a browser's POST does not always carry Origin (an older browser's
// form, an extension or a proxy that strips it), and the gateway cannot tell such a POST from
// curl's. Before, a POST without Origin was served whatever its Content-Type, and a page's
// text/plain initialize opened a session and its server on a loopback gateway without keys.
func TestPostWithoutOriginMustBeJSON(t *testing.T) {
	t.Parallel()
	postMustBeJSON(t, "")
}

// postMustBeJSON POSTs initializes with the header lines page and each Content-Type: every one
// but application/json must be refused 415 with a JSON-RPC error (id null) naming
// application/json, and open no session.
func postMustBeJSON(t *testing.T, page string) {
	g := newGW(t, nil)
	for _, head := range []string{
		page + "Content-Type: text/plain;charset=UTF-8\r\n",
		page, // a Blob without a type (or curl -d): no Content-Type
		page + "Content-Type: application/x-www-form-urlencoded\r\n",
		page + "Content-Type: multipart/form-data; boundary=x\r\n",
		page + "Content-Type: text/plain; a=application/json\r\n",
		page + "Content-Type: application/json-seq\r\n",
		page + "Content-Type: application/json, text/plain\r\n",
	} {
		code, body := rawDo(t, g.url, "POST", head, initBody)
		var e struct {
			ID    json.RawMessage `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if code != http.StatusUnsupportedMediaType || json.Unmarshal([]byte(body), &e) != nil || string(e.ID) != "null" || e.Error.Code != -32600 || !strings.Contains(e.Error.Message, "application/json") {
			t.Errorf("%q: %d %s; want 415 with a JSON-RPC error naming application/json", head, code, body)
		}
	}
	g.mu.Lock()
	made := len(g.proxies)
	g.mu.Unlock()
	if made != 0 {
		t.Fatalf("refused initializes made %d sessions", made)
	}
	for _, head := range []string{
		page + "Content-Type: Application/JSON; charset=utf-8\r\n",
		page + "Content-Type: application/json\r\n", // the SDKs' clients, curl -H
		page + "Content-Type: application/json; charset=utf-8\r\n",
	} {
		if code, body := rawDo(t, g.url, "POST", head, initBody); code != http.StatusOK || !strings.Contains(body, `"result"`) {
			t.Errorf("%q: %d %s; want the initialize answered", head, code, body)
		}
	}
}
