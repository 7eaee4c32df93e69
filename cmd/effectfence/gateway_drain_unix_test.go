//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docs/gateway.md, Graceful shutdown: "The listener closes at the signal, so a new connection
// is refused (...); an `initialize` on a connection already open while the gateway stops gets
// 503", while a call in flight finishes within --grace and is answered. Against the real
// binary: a fenced call runs inside the demo server (15 s) when SIGTERM comes, and another
// client has a connection open with an initialize whose body is half sent. After the signal a
// new connection is refused while that call still runs (at the signal, not once the calls
// in flight are done), the initialize, once its body is in, is answered 503 (the gateway
// is stopping), the call is answered with its result, the gateway exits 0 and the call ran
// once.
func TestStoppingGatewayRefusesNewConnectionsAndSessions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects, ledger := filepath.Join(dir, "effects"), filepath.Join(dir, "l.db")
	g := startGateway(t, "--ledger", ledger, "--listen", "127.0.0.1:0", "--grace", "60s",
		"--", effectfence(t), "demo-server", "--latency", "15s", "--effects", effects)
	u, err := url.Parse(g.url)
	if err != nil {
		t.Fatal(err)
	}
	sid := g.initialize(t)
	answer := g.postAsync(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_drain"}}}`)
	waitInFlight(t, ledger, g)

	// A connection open before the signal, its initialize's head and part of its body sent.
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"late","version":"1"}}}`
	raw, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n", u.Path, u.Host, len(init))
	if _, err := io.WriteString(raw, head+init[:20]); err != nil {
		t.Fatal(err)
	}
	// The gateway reads the head: the connection is busy, not idle. On Linux, wait until it has
	// taken every byte sent from the socket (its receive queue, /proc/net/tcp), then give it a
	// moment to parse them; elsewhere a fixed wait.
	waitSocketDrained(t, raw)
	time.Sleep(50 * time.Millisecond)

	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			// Refused; or reset: a connection the kernel completed in the listener's backlog
			// just as the listener closed is reset, never accepted (CI at load saw it once).
			if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("a new connection after the signal failed with %v, want it refused", err)
			}
			break
		}
		c.Close()
		select {
		case got := <-answer:
			t.Fatalf("new connections were accepted after SIGTERM until the call in flight was answered (%.200q): the listener did not close at the signal\n%s", got, g.logText())
		case <-time.After(50 * time.Millisecond):
		}
	}

	if _, err := io.WriteString(raw, init[20:]); err != nil {
		t.Fatalf("the rest of the open connection's initialize: %v", err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(raw), nil)
	if err != nil {
		t.Fatalf("the initialize on a connection open before the signal got no answer: %v\n%s", err, g.logText())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "the gateway is stopping") || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("the initialize on a connection open before the signal: %d %q (session %q), want 503 saying the gateway is stopping, and no session", resp.StatusCode, body, resp.Header.Get("Mcp-Session-Id"))
	}

	select {
	case got := <-answer:
		if !strings.Contains(got, "ch_demo_") {
			t.Fatalf("the call in flight at the signal was answered %q, want its result\n%s", got, g.logText())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the call in flight at the signal got no answer\n%s", g.logText())
	}
	if err := g.cmd.Wait(); err != nil {
		t.Fatalf("the gateway exited with %v\n%s", err, g.logText())
	}
	if n := effectsOf(t, effects); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// waitSocketDrained waits until the peer of c (a TCP connection to a server on this machine)
// has read everything c sent: the server's socket of the pair shows an empty receive queue in
// /proc/net/tcp. Where that file cannot be read it waits 300 ms.
func waitSocketDrained(t *testing.T, c net.Conn) {
	t.Helper()
	local, remote := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
	// The server's socket: local address the server's port, remote address c's port.
	want := fmt.Sprintf(":%04X ", remote.Port)
	peer := fmt.Sprintf(":%04X ", local.Port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			time.Sleep(300 * time.Millisecond)
			return
		}
		found := false
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// sl local_address rem_address st tx_queue:rx_queue ...
			if len(f) < 5 || !strings.HasSuffix(f[1]+" ", want) || !strings.HasSuffix(f[2]+" ", peer) {
				continue
			}
			found = true
			if _, rx, ok := strings.Cut(f[4], ":"); ok && strings.Trim(rx, "0") == "" {
				return
			}
		}
		if !found {
			t.Fatalf("the server's socket of %v -> %v is not in /proc/net/tcp", local, remote)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server has not read what %v sent in 30 s", local)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
