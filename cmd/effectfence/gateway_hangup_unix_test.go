//go:build unix

package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An initialize whose client hangs up before the answer opened a session nobody can use (its
// id never reached the client of a JSON answer, and the client of an SSE answer, which had
// it, got no initialize result, so it starts over): the gateway ends it then, stopping its server, instead of holding both (and a
// place under --max-sessions) until --session-idle. Before 2026-12-04 it held them. The real
// binary, its server a real process that never answers initialize (so the client's wait
// ends by its own hang-up) and runs one of its own; --session-idle and --init-timeout far
// longer than the test.
func TestGatewayReleasesASessionWhoseInitializeWasAbandoned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	g := startGateway(t, "--ledger", "memory", "--listen", "127.0.0.1:0", "--session-idle", "1h", "--init-timeout", "1h", "--grace", "500ms",
		"--", "sh", "-c", slowServer, pidFile)
	for _, accept := range []string{"application/json, text/event-stream", "application/json"} {
		os.Remove(pidFile)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Accept", accept)
		req.Header.Set("Content-Type", "application/json")
		done := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil { // an SSE answer's headers come at once (the session's id among them)
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			done <- err
		}()
		var pid int
		for deadline := time.Now().Add(60 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
			if b, err := os.ReadFile(pidFile); err == nil {
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server never started; log:\n%s", g.logText())
			}
		}
		cancel() // the client hangs up before the initialize is answered
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("the initialize ended with %v, want the client's hang-up", err)
		}
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			health := g.healthz(t)
			gone := !running(pid)
			if health == "ok 0 sessions" && gone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Accept %q: a minute after its client hung up, the abandoned session is still held (/healthz: %q; its server process alive: %v); log:\n%s", accept, health, !gone, g.logText())
			}
		}
	}
}

// slowServer is an MCP server command (sh -c slowServer PIDFILE) that never answers
// initialize, and starts a process of its own, in its process group, whose pid it writes to
// PIDFILE: a server such as npx's, whose own children must go with it.
const slowServer = `sleep 3600 & echo $! > "$0.tmp" && mv "$0.tmp" "$0"; wait`

// running says process pid runs: it exists and, where /proc tells, is not a zombie (dead,
// not yet reaped by whoever inherited it).
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, after, ok := strings.Cut(string(b), ") ")
	return !ok || !strings.HasPrefix(after, "Z")
}

// healthz is the gateway's /healthz body, trimmed.
func (g *gatewayProc) healthz(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(g.url, "/mcp") + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// No server of the gateway outlives it, a server still in its handshake included: a SIGTERM
// during an initialize the server never answers stops that server after the grace and the
// gateway exits; a second SIGTERM kills it at once. Before 2026-12-04 a server whose
// handshake was in progress was reached by neither: the first signal's stop waited for the
// initialize until --init-timeout, and after the second the gateway exited with the server's
// processes still running (on Linux the server's own process died with the gateway, not
// those it started).
func TestGatewayStopsAServerInItsHandshake(t *testing.T) {
	t.Parallel()
	for _, signals := range []int{1, 2} {
		dir := t.TempDir()
		pidFile := filepath.Join(dir, "pid")
		g := startGateway(t, "--ledger", "memory", "--listen", "127.0.0.1:0", "--init-timeout", "1h", "--grace", "500ms",
			"--", "sh", "-c", slowServer, pidFile)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
			req.Header.Set("Accept", "application/json")
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		var pid int
		for deadline := time.Now().Add(60 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
			if b, err := os.ReadFile(pidFile); err == nil {
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server never started; log:\n%s", g.logText())
			}
		}
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		exited := make(chan struct{})
		go func() { g.cmd.Process.Wait(); close(exited) }()
		for i := 0; i < signals; i++ {
			if i > 0 {
				for deadline := time.Now().Add(60 * time.Second); !strings.Contains(g.logText(), "stopping; calls in flight"); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the first SIGTERM was never logged; log:\n%s", g.logText())
					}
				}
			}
			if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("%d SIGTERM: the gateway has not exited after a minute; log:\n%s", signals, g.logText())
		}
		for deadline := time.Now().Add(30 * time.Second); running(pid); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d SIGTERM: the gateway exited, its server (pid %d) still runs; log:\n%s", signals, pid, g.logText())
			}
		}
	}
}

// The same with --upstream: a SIGTERM during an initialize the upstream never answers ends
// that request after the grace, and the gateway exits. Before 2026-12-04 the stop did not
// reach an upstream session still in its handshake and waited for its initialize until
// --init-timeout. The upstream is a real HTTP server in this process, which sees its request
// end.
func TestGatewayStopsAnUpstreamInItsHandshake(t *testing.T) {
	t.Parallel()
	seen, ended := make(chan struct{}, 1), make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "no", http.StatusMethodNotAllowed)
			return
		}
		io.Copy(io.Discard, r.Body) // read: the server then watches for the client hanging up
		select {
		case seen <- struct{}{}:
		default:
		}
		select { // never answers; bounded only so that a failed test ends
		case <-r.Context().Done():
		case <-time.After(3 * time.Minute):
		}
		select {
		case ended <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(up.Close) // after the gateway's cleanup, which kills it: its request then ends
	g := startGateway(t, "--ledger", "memory", "--listen", "127.0.0.1:0", "--init-timeout", "1h", "--grace", "500ms", "--upstream", up.URL+"/mcp")
	go func() {
		req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	select {
	case <-seen:
	case <-time.After(60 * time.Second):
		t.Fatalf("the upstream never got the initialize; log:\n%s", g.logText())
	}
	exited := make(chan struct{})
	go func() { g.cmd.Process.Wait(); close(exited) }()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("the gateway has not exited a minute after SIGTERM; log:\n%s", g.logText())
	}
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream's initialize request still runs after the gateway exited")
	}
}
