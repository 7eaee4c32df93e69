//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// killingUpstream is a Streamable HTTP MCP server with one tool, pay, that SIGKILLs the
// gateway in front of it the moment the call reaches it (before it answers), and counts the
// calls it got.
type killingUpstream struct {
	mu      sync.Mutex
	gateway *os.Process // killed by the next call, then nil
	calls   int
}

func (u *killingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if m.ID == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	result := `{}`
	switch m.Method {
	case "initialize":
		w.Header().Set("Mcp-Session-Id", "s1")
		result = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"killing","version":"1"}}`
	case "tools/list":
		result = `{"tools":[{"name":"pay","inputSchema":{"type":"object"}}]}`
	case "tools/call":
		u.mu.Lock()
		u.calls++
		g := u.gateway
		u.gateway = nil
		u.mu.Unlock()
		if g != nil {
			_ = g.Kill()
			_, _ = g.Wait()
		}
		result = `{"content":[{"type":"text","text":"paid"}]}`
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, result)
}

func (u *killingUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls
}

// docs/gateway.md: a side-effecting call runs at most once per intent, and a gateway killed
// mid-call leaves it fenced as unknown. The claim must be in the ledger before the call leaves
// for the server: here the upstream itself SIGKILLs the gateway the moment the call reaches it,
// so whatever the gateway had not written by then is lost. A gateway started again on that
// ledger refuses the re-sent call (prior_failure, NOT executed) instead of sending it again,
// and the upstream has been called once.
func TestGatewayKilledAsTheCallArrivesUpstream(t *testing.T) {
	t.Parallel()
	up := &killingUpstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	ledger := filepath.Join(t.TempDir(), "l.db")
	args := []string{"--ledger", ledger, "--scope", "pay", "--listen", "127.0.0.1:0", "--fence", "pay", "--upstream", srv.URL + "/mcp"}
	const payCall = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"pay","arguments":{"amount":7}}}`

	g1 := startGateway(t, args...)
	sid := g1.initialize(t)
	up.mu.Lock()
	up.gateway = g1.cmd.Process
	up.mu.Unlock()
	req, _ := http.NewRequest(http.MethodPost, g1.url, strings.NewReader(fmt.Sprintf(payCall, 2)))
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Mcp-Session-Id", sid)
	if resp, err := http.DefaultClient.Do(req); err == nil { // the gateway dies under it
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "paid") {
			t.Fatalf("the killed gateway answered %s", b)
		}
	}
	if up.count() != 1 {
		t.Fatalf("the upstream got %d calls, want 1", up.count())
	}

	g2 := startGateway(t, args...)
	_, body := g2.post(t, "", g2.initialize(t), fmt.Sprintf(payCall, 3))
	if !strings.Contains(body, "prior_failure") || !strings.Contains(body, "NOT executed") {
		t.Fatalf("the call re-sent to the gateway started again was answered %s; want a prior_failure refusal\n%s", body, g2.logText())
	}
	if n := up.count(); n != 1 {
		t.Fatalf("the upstream got %d calls of one intent across a gateway killed as the first arrived, want 1", n)
	}
}
