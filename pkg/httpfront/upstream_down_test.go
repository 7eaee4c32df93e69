package httpfront_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// docs/gateway.md: only a request that provably never reached the server (the connection
// refused before any byte of it was sent) counts as not run. `wrap --upstream` in front of
// the mcptest server over HTTP: with the server down, a fenced call is refused as not sent and
// its intent released, not fenced; once the server is back at the same address, the same call
// runs, once.
func TestUpstreamDownIsNotSentAndTheRetryRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := mcptest.Env(effects, "")
	u, stop := startProcT(t, append(env, mcptest.EnvHTTP+"=127.0.0.1:0"), "mcptest: listening on ", exe, "-test.run=^$")
	t.Cleanup(func() { stop() })
	log := &logBuf{}
	agent, err := mcpstdio.Start(context.Background(), mcpstdio.Config{
		Command: []string{binary(t), "wrap", "--ledger", filepath.Join(dir, "ledger.db"), "--scope", "down", "--upstream", u},
		Env:     env, Stderr: log, InitTimeout: 60 * time.Second,
		Init: json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"down","version":"1"}}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	callTool := func(args string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := agent.Call(ctx, "tools/call", json.RawMessage(`{"name":"slow","arguments":`+args+`}`))
		if err != nil {
			return "error: " + err.Error()
		}
		return string(res)
	}
	if got := callTool(`{"tag":"up"}`); !strings.Contains(got, "slow done") {
		t.Fatalf("with the server up: %s; wrap log:\n%s", got, log.String())
	}
	stop() // the server goes away; its address refuses connections
	if got := callTool(`{"tag":"down"}`); !strings.Contains(got, `"isError":true`) || !strings.Contains(got, "not sent") {
		t.Fatalf("with the server down: %s, want the not-sent refusal; wrap log:\n%s", got, log.String())
	}
	addr, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	_, stop2 := startProcT(t, append(env, mcptest.EnvHTTP+"="+addr.Host), "mcptest: listening on ", exe, "-test.run=^$")
	t.Cleanup(stop2)
	var got string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		// The first tries may meet the restart's backoff (not sent again); none may be fenced.
		if got = callTool(`{"tag":"down"}`); !strings.Contains(got, "not sent") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(got, "slow done") {
		t.Fatalf("the same call with the server back: %s, want it to run; wrap log:\n%s", got, log.String())
	}
	n := 0
	for _, e := range mcptest.Effects(effects) {
		if strings.HasPrefix(e, "slow tag=down") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the call ran %d times, want 1", n)
	}
}
