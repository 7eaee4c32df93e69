package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// docs/gateway.md: identical calls are one intent whichever session or process they arrive at,
// as long as those share a ledger and a scope. Two real gateway processes on one SQLite file
// (one --scope), two sessions on each, eight identical charge_card calls at once: one
// execution, counted in the effects file every session's demo server appends to, and every
// answer a success carrying that execution's charge.
func TestTwoGatewaysOnOneSQLiteFileRunOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	args := []string{"--ledger", filepath.Join(dir, "shared.db"), "--scope", "shop", "--listen", "127.0.0.1:0",
		"--", effectfence(t), "demo-server", "--latency", "300ms", "--effects", effects}
	gws := []*gatewayProc{startGateway(t, args...), startGateway(t, args...)}
	type sess struct {
		g   *gatewayProc
		sid string
	}
	var sessions []sess
	for _, g := range gws {
		for range 2 {
			resp, body := g.post(t, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
			sid := resp.Header.Get("Mcp-Session-Id")
			if resp.StatusCode != http.StatusOK || sid == "" {
				t.Fatalf("initialize: %d %s", resp.StatusCode, body)
			}
			g.post(t, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			g.post(t, "", sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
			sessions = append(sessions, sess{g, sid})
		}
	}
	answers := make([]string, 8)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		s := sessions[i%len(sessions)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, answers[i] = s.g.post(t, "", s.sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_fleet"}}}`, 10+i))
		}()
	}
	close(start)
	wg.Wait()
	if n := effectsOf(t, effects); n != 1 {
		t.Fatalf("%d executions of eight identical calls across two gateways on one ledger, want 1: %q", n, answers)
	}
	for i, a := range answers {
		if !strings.Contains(a, "ch_demo_0001") || strings.Contains(a, `"isError":true`) {
			t.Fatalf("answer %d: %s", i, a)
		}
	}
}
