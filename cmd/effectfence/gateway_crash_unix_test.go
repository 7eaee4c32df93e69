//go:build unix

package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// docs/gateway.md and SPEC §4: a gateway killed (SIGKILL) while a fenced call is inside its
// server, then started again on the same SQLite ledger, does not run that call again: the
// claim of the dead process is an unknown outcome, and the re-sent call (a new session, a new
// JSON-RPC id) is refused as such, telling the agent it was NOT executed.
func TestGatewayKilledMidCallThenRestarted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects, ledger := filepath.Join(dir, "effects"), filepath.Join(dir, "l.db")
	const latency = time.Second
	args := []string{"--ledger", ledger, "--listen", "127.0.0.1:0", "--", effectfence(t), "demo-server", "--latency", latency.String(), "--effects", effects}
	const chargeCall = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_crash"}}}`

	g1 := startGateway(t, args...)
	sid := g1.initialize(t)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, g1.url, strings.NewReader(strings.Replace(chargeCall, "%d", "2", 1)))
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Session-Id", sid)
		if resp, err := http.DefaultClient.Do(req); err == nil { // the gateway dies under it
			resp.Body.Close()
		}
	}()
	// Kill it once the call is admitted (claimed in the ledger), so inside the server.
	waitInFlight(t, ledger, g1)
	killed := time.Now()
	if err := g1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = g1.cmd.Wait()

	g2 := startGateway(t, args...)
	_, body := g2.post(t, "", g2.initialize(t), strings.Replace(chargeCall, "%d", "3", 1))
	if !strings.Contains(body, "prior_failure") || !strings.Contains(body, "NOT executed") {
		t.Fatalf("the call re-sent to the restarted gateway was answered %s; want a prior_failure refusal saying it was NOT executed\n%s", body, g2.logText())
	}
	// The orphaned server may finish the first execution (or die with its gateway); the
	// restarted gateway must not have added one.
	time.Sleep(time.Until(killed.Add(latency + 300*time.Millisecond)))
	if n := effectsOf(t, effects); n > 1 {
		t.Fatalf("%d executions of one call across a crash, want at most 1", n)
	}
}

// waitInFlight waits until the gateway's ledger holds one call in flight.
func waitInFlight(t *testing.T, ledger string, g *gatewayProc) {
	t.Helper()
	waitOneInFlight(t, ledger, g.logText)
}
