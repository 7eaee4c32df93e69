//go:build linux

package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The gateway's second signal "exits now": it names the calls it abandons and kills the
// servers of every session, as stdio wrap does its one server. The first signal has already
// taken every session out of the open ones to stop them (the grace), so before 2026-12-04 the
// second reached none: it logged "0 calls abandoned" with a call inside its server, and the
// servers' process groups outlived the gateway (a server started through npx or uv is a
// grandchild, which the kernel's parent-death signal does not reach). Here the server's group
// holds a sleep that ignores its stdin's end; it must be gone once the gateway has exited.
func TestGatewaySecondSignalKillsTheServersBeingStopped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ledger, pidFile := filepath.Join(dir, "l.db"), filepath.Join(dir, "sleep.pid")
	server := fmt.Sprintf(`sleep 600 </dev/null >/dev/null 2>&1 & echo $! > %s; exec %s demo-server --latency 10m --effects %s`,
		pidFile, effectfence(t), filepath.Join(dir, "effects"))
	g := startGateway(t, "--ledger", ledger, "--listen", "127.0.0.1:0", "--grace", "10m", "--", "sh", "-c", server)
	resp, body := g.post(t, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	g.post(t, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_again"}}}`))
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Session-Id", sid)
		if resp, err := http.DefaultClient.Do(req); err == nil { // the gateway exits under it
			resp.Body.Close()
		}
	}()
	waitInFlight(t, ledger, g)
	raw, err := os.ReadFile(pidFile) // written before the server started
	if err != nil {
		t.Fatal(err)
	}
	sleepPID, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}

	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The session is being stopped once its proxy says it waits for the call.
	waitLog(t, g, "waiting up to 10m0s for 1 call")
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("the gateway did not exit on the second signal\n%s", g.logText())
	}
	if log := g.logText(); !strings.Contains(log, "again: exiting now and killing the MCP servers; 1 call abandoned") || !strings.Contains(log, `"charge_card"`) {
		t.Errorf("the second signal's line does not name the call inside the server:\n%s", log)
	}
	// SIGKILL of the group was sent before the exit; the kernel ends the sleep soon after.
	deadline := time.Now().Add(30 * time.Second)
	for alive(sleepPID) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(sleepPID, syscall.SIGKILL)
			t.Fatalf("the server's process group outlived the gateway's exit on the second signal\n%s", g.logText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog waits until the gateway's log holds s.
func waitLog(t *testing.T, g *gatewayProc, s string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(g.logText(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway never logged %q\n%s", s, g.logText())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
