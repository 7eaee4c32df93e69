package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// TestUpstreamURLSecretsNotInTheLedger: hosted MCP servers put the account's secret in the URL,
// in its path (`https://…/api/mcp/s/<secret>/mcp`) as often as in its query or user
// information. A call the upstream cut off is an unknown outcome whose reason, recorded in the
// ledger and shown to the agent, names the server: by its scheme and host, never by the rest
// of its URL (docs/privacy.md: the reason holds the server's words). Nor does wrap's log.
func TestUpstreamURLSecretsNotInTheLedger(t *testing.T) {
	t.Parallel()
	const inPath, inQuery, inUser = "PATHs3cretZQ81", "QUERYs3cretZQ82", "USERs3cretZQ83"
	var cuts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.Unmarshal(b.Bytes(), &m)
		w.Header().Set("Content-Type", "application/json")
		switch m.Method {
		case "initialize":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"cut","version":"1"}}}`, m.ID)
		case "tools/list":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"pay","inputSchema":{"type":"object"}}]}}`, m.ID)
		case "tools/call":
			// The request arrived: the connection is cut before any answer.
			cuts.Add(1)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(srv.Close)
	upstream := strings.Replace(srv.URL, "http://", "http://acct:"+inUser+"@", 1) + "/api/mcp/s/" + inPath + "/mcp?api_key=" + inQuery
	ledger := filepath.Join(t.TempDir(), "l.db")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := &syncbuf.Buffer{}
	s, err := mcpstdio.Start(ctx, mcpstdio.Config{
		Command: []string{effectfence(t), "wrap", "--ledger", ledger, "--upstream", upstream},
		Env:     append(os.Environ(), "GORACE=atexit_sleep_ms=0"), Stderr: log, InitTimeout: time.Minute,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	defer s.Close()
	res, err := s.CallTool(ctx, "pay", json.RawMessage(`{"amount":4900}`))
	if err != nil || !strings.Contains(string(res), "whether it took effect is unknown") || cuts.Load() != 1 {
		t.Fatalf("pay: %s %v (%d calls reached the upstream); want an unknown outcome\n%s", res, err, cuts.Load(), log.String())
	}
	s.Close()

	if states := ledgerStates(t, ledger); states[fence.StateUnknown] != 1 {
		t.Fatalf("ledger states %v; want the call unknown", states)
	}
	files, _ := filepath.Glob(ledger + "*")
	for _, secret := range []string{inPath, inQuery, inUser} {
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(secret)) {
				t.Errorf("ledger file %s holds the URL's secret %s", f, secret)
			}
		}
		if strings.Contains(string(res), secret) {
			t.Errorf("the agent's answer holds the URL's secret %s: %s", secret, res)
		}
		if strings.Contains(log.String(), secret) {
			t.Errorf("wrap's log holds the URL's secret %s:\n%s", secret, log.String())
		}
	}
	if !strings.Contains(string(res), strings.TrimPrefix(srv.URL, "http://")) {
		t.Errorf("the answer does not name the server's host: %s", res)
	}
}
