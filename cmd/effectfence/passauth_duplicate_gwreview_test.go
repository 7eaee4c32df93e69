package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// With --pass-auth, the principal a call is fenced under and the credentials the upstream
// runs it with must be the same caller's. A client that sends Authorization twice is the
// first header's caller on both sides: the upstream receives that header alone (never the
// second, which an upstream reading the last would take for another account), and the call
// is that caller's receipt: replayed to the first header's owner, run again for the second's.
// The upstream is an in-process MCP server that records every Authorization it is sent and
// counts the calls it runs.
func TestPassAuthDuplicateAuthorizationIsOneCaller(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{} // Authorization values, joined, as the upstream received them
	runs := map[string]int{} // tools/call runs by the first Authorization
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[strings.Join(r.Header.Values("Authorization"), " | ")]++
		mu.Unlock()
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal(body, &m); err != nil || m.ID == nil || m.Method == "" {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var res string
		switch m.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "s1")
			res = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}`
		case "tools/list":
			res = `{"tools":[{"name":"pay","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			mu.Lock()
			runs[r.Header.Get("Authorization")]++
			n := runs[r.Header.Get("Authorization")]
			mu.Unlock()
			res = fmt.Sprintf(`{"content":[{"type":"text","text":"paid %d"}]}`, n)
		default:
			res = `{}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, res)
	}))
	t.Cleanup(up.Close)
	g := startGateway(t, "--ledger", filepath.Join(t.TempDir(), "l.db"), "--listen", "127.0.0.1:0", "--pass-auth", "--upstream", up.URL)

	pay := func(authz ...string) string {
		t.Helper()
		head := "Content-Type: application/json\r\nAccept: application/json\r\n"
		for _, a := range authz {
			head += "Authorization: " + a + "\r\n"
		}
		code, body, sid := rawPost(t, g.url, head, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, "")
		if code != http.StatusOK || sid == "" {
			t.Fatalf("initialize: %d %.300s", code, body)
		}
		code, body, _ = rawPost(t, g.url, head, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"pay","arguments":{"to":"x"}}}`, sid)
		if code != http.StatusOK || !strings.Contains(body, "paid") {
			t.Fatalf("pay: %d %.300s", code, body)
		}
		return body
	}
	first := pay("Bearer bob-token-0123456789", "Bearer alice-token-0123456789")
	if strings.Contains(first, "effectfence/replayed") {
		t.Fatalf("the first call was a replay: %s", first)
	}
	if again := pay("Bearer bob-token-0123456789"); !strings.Contains(again, "effectfence/replayed") {
		t.Fatalf("bob's identical call after his call sent with two headers: %s, want his receipt replayed", again)
	}
	if alice := pay("Bearer alice-token-0123456789"); strings.Contains(alice, "effectfence/replayed") {
		t.Fatalf("alice's identical call was handed the receipt of a call her token did not run: %s", alice)
	}
	mu.Lock()
	defer mu.Unlock()
	for v := range seen {
		if strings.Contains(v, "|") {
			t.Fatalf("the upstream received Authorization more than once (%d requests): %q", seen[v], v)
		}
	}
	if runs["Bearer bob-token-0123456789"] != 1 || runs["Bearer alice-token-0123456789"] != 1 {
		t.Fatalf("calls run by the upstream, by Authorization: %v; want bob's 1 and alice's 1", runs)
	}
}

// rawPost is rawRequest for a POST on the session sid ("": none); it returns the status, the
// body and the Mcp-Session-Id answered.
func rawPost(t *testing.T, gwURL, head, body, sid string) (int, string, string) {
	t.Helper()
	if sid != "" {
		head += "Mcp-Session-Id: " + sid + "\r\n"
	}
	return rawRequestWithHeader(t, gwURL, "POST", head, body, "Mcp-Session-Id")
}
