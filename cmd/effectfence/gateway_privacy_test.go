package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayKeepsSecretsOutOfItsLedgerLogAndMetrics: docs/privacy.md through the real gateway
// (`wrap --listen` in front of the demo server, API keys): a redacted argument and a hash-only
// result, sent with a bearer key, reach neither the ledger's files, nor the gateway's log, nor
// /metrics; the key is in none of them either, and /metrics names no tool that was not given
// with --metrics-tool, and no principal.
func TestGatewayKeepsSecretsOutOfItsLedgerLogAndMetrics(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ledger := filepath.Join(dir, "l.db")
	const customer = "cus_GWpriv5Q7XK2"
	g := startGateway(t, "--ledger", ledger, "--listen", "127.0.0.1:0", "--scope", "shop", "--api-keys", keysFile(t),
		"--redact", "charge_card:customer", "--keep-result", "charge_card=hash",
		"--", effectfence(t), "demo-server", "--latency", "1ms", "--effects", filepath.Join(dir, "effects"))
	resp, body := g.post(t, aliceToken, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s\n%s", resp.StatusCode, body, g.logText())
	}
	g.post(t, aliceToken, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"` + customer + `"}}}`
	resp, first := g.post(t, aliceToken, sid, call)
	if resp.StatusCode != http.StatusOK || !strings.Contains(first, `"result"`) || strings.Contains(first, `"isError":true`) {
		t.Fatalf("charge_card: %d %s\n%s", resp.StatusCode, first, g.logText())
	}
	resultSecret := "" // a piece of the result only the first caller saw: the charge's id
	if i := strings.Index(first, "ch_"); i >= 0 {
		end := i + 3
		for end < len(first) && (first[end] == '_' || first[end] >= '0' && first[end] <= '9' || first[end] >= 'a' && first[end] <= 'z' || first[end] >= 'A' && first[end] <= 'Z') {
			end++
		}
		resultSecret = first[i:end]
	}
	if len(resultSecret) < 6 {
		t.Fatalf("the demo's charge has no id to look for: %s", first)
	}
	if _, dup := g.post(t, aliceToken, sid, strings.Replace(call, `"id":2`, `"id":3`, 1)); !strings.Contains(dup, "result_not_kept") || strings.Contains(dup, resultSecret) {
		t.Fatalf("the duplicate of a hash-only call: %s", dup)
	}
	mresp, err := http.Get(strings.TrimSuffix(g.url, "/mcp") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !bytes.Contains(metrics, []byte(`outcome="replayed"`)) {
		t.Fatalf("/metrics counted no replay (the test looks at nothing):\n%s", metrics)
	}
	for _, s := range []string{"charge_card", "alice", aliceToken, customer, resultSecret} {
		if bytes.Contains(metrics, []byte(s)) {
			t.Errorf("/metrics holds %q", s)
		}
	}
	for _, s := range []string{aliceToken, customer, resultSecret} {
		if strings.Contains(g.logText(), s) {
			t.Errorf("the gateway's log holds %q:\n%s", s, g.logText())
		}
	}
	_ = g.cmd.Process.Signal(os.Interrupt)
	_ = g.cmd.Wait()
	files, _ := filepath.Glob(ledger + "*")
	var all []byte
	for _, f := range files {
		b, _ := os.ReadFile(f)
		all = append(all, b...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the spool directory
		}
		for _, s := range []string{aliceToken, customer, resultSecret} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("ledger file %s holds %q", f, s)
			}
		}
	}
	if !bytes.Contains(all, []byte(`"customer":"[redacted]"`)) {
		t.Errorf("the ledger holds no redacted charge (the test looks at nothing)")
	}
}
