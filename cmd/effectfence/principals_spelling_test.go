package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// chargeAs is gatewayProc.charge with the Authorization header given whole, as a client
// spells it.
func (g *gatewayProc) chargeAs(t *testing.T, authz string) string {
	t.Helper()
	post := func(sid, body string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(body))
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", authz)
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s; log:\n%s", resp.StatusCode, body, g.logText())
	}
	post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp, body = post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_1"}}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"result"`) || strings.Contains(body, `"isError":true`) {
		t.Fatalf("charge_card as %q: %d %s; log:\n%s", strings.Fields(authz)[0], resp.StatusCode, body, g.logText())
	}
	return body
}

// With --pass-auth the principal is the client's credentials. The Bearer scheme's name is
// case-insensitive and one or more spaces separate it from the token (RFC 9110, 11.4), so
// `bearer T`, `BEARER  T` and `Bearer T` are one token, one caller and, at the upstream, one
// account: a retry that spells the header otherwise (another client library of the same
// agent) is a duplicate, replayed, never a second charge. Before, the principal was the hash
// of the header's bytes: each spelling was another caller and the charge ran again. Another
// token stays another caller. The upstream is a real gateway demanding keys (it reads the
// scheme in any case) in front of the demo server, whose effects count what ran.
func TestGatewayPassAuthBearerSpellings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	up := startGateway(t, "--ledger", "memory", "--listen", "127.0.0.1:0", "--api-keys", keysFile(t), "--pass", "charge_card",
		"--", effectfence(t), "demo-server", "--latency", "1ms", "--effects", effects)
	g := startGateway(t, "--ledger", filepath.Join(dir, "l.db"), "--listen", "127.0.0.1:0", "--pass-auth", "--upstream", up.url)
	if first := g.chargeAs(t, "Bearer "+aliceToken); strings.Contains(first, "effectfence/replayed") || effectsOf(t, effects) != 1 {
		t.Fatalf("alice's call: %s, %d executions", first, effectsOf(t, effects))
	}
	for _, authz := range []string{"bearer " + aliceToken, "BEARER  " + aliceToken, "beaRer   " + aliceToken} {
		if again := g.chargeAs(t, authz); !strings.Contains(again, "effectfence/replayed") || effectsOf(t, effects) != 1 {
			t.Errorf("alice's duplicate with her token spelled %q: %d executions (want 1), replayed %v",
				strings.ReplaceAll(authz, aliceToken, "<token>"), effectsOf(t, effects), strings.Contains(again, "effectfence/replayed"))
		}
	}
	if bob := g.chargeAs(t, "bearer "+bobToken); strings.Contains(bob, "effectfence/replayed") || effectsOf(t, effects) != 2 {
		t.Fatalf("bob's identical call is another caller's action: %s, %d executions", bob, effectsOf(t, effects))
	}
}
