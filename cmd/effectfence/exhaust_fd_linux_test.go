package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fdLimit is the open-file limit the flood tests run the gateway under.
const fdLimit = 128

// underFDLimit is the prlimit command that runs the gateway with fdLimit open files at most,
// or skips the test.
func underFDLimit(t *testing.T) []string {
	t.Helper()
	path, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("a low open-file limit needs prlimit (util-linux)")
	}
	return []string{path, fmt.Sprintf("--nofile=%d:%d", fdLimit, fdLimit)}
}

// flood opens n connections to the gateway, each asking for a page that is not there (a 404,
// quickly answered) and then kept open (idle, as a keep-alive client leaves it), and returns
// them.
func flood(t *testing.T, url string, n int) []net.Conn {
	t.Helper()
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("flood: %v after %d connections", err, len(conns))
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /flood HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	}
	return conns
}

// jsonLines fails the test unless every line of log is a JSON object (--log-format json).
func jsonLines(t *testing.T, log string) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a log line that is not JSON with --log-format json: %q\nlog:\n%s", l, log)
		}
	}
}

// A client floods `wrap --listen` (the real binary, its open files limited to 128) with
// hundreds of keep-alive connections while a fenced call runs in a child. Before, the flood
// took every file descriptor: accept failed (logged by Go's HTTP server as plain text, even
// with --log-format json), and a new agent's session failed because its server's pipes
// could not be made. Now the gateway holds at most --max-conns connections (half the limit
// by default), closing the one idle longest to take a new one: the call in flight keeps its
// outcome, a new agent opens a session at once and its duplicate of the call is answered
// with that outcome (one execution), and every log line is JSON.
//
// With a PostgreSQL ledger the pool's connections to the server need files too, and the call's
// outcome is written on one of them while the flood holds the rest.
func TestConnectionFloodLeavesTheFenceItsFiles(t *testing.T) {
	t.Parallel()
	under := underFDLimit(t)
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		floodWithCallInFlight(t, under, filepath.Join(t.TempDir(), "l.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		floodWithCallInFlight(t, under, pgLedger(t))
	})
}

func floodWithCallInFlight(t *testing.T, under []string, ledger string) {
	effects := filepath.Join(t.TempDir(), "effects")
	g := startGatewayUnder(t, under, "--log-format", "json", "--ledger", ledger, "--listen", "127.0.0.1:0",
		"--", effectfence(t), "demo-server", "--latency", "2s", "--effects", effects)
	const charge = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_flood"}}}`
	open := func(c *http.Client) (string, string) {
		resp, body := postWith(t, c, g.url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		return resp.Header.Get("Mcp-Session-Id"), body
	}
	first := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	sid, body := open(first)
	if sid == "" {
		t.Fatalf("initialize: %s\n%s", body, g.logText())
	}
	postWith(t, first, g.url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	answered := make(chan string, 1)
	go func() {
		_, body := postWith(t, first, g.url, sid, charge)
		answered <- body
	}()
	waitInFlight(t, ledger, g)

	flood(t, g.url, 3*fdLimit)
	// A new agent, on a connection of its own, while the flood holds its connections (the new
	// one is accepted after those queued before it).
	second := &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
	sid2, body := open(second)
	if sid2 == "" || !strings.Contains(body, `"result"`) {
		t.Fatalf("a new session during the flood: %q %s; want it opened\nlog:\n%s", sid2, body, g.logText())
	}
	postWith(t, second, g.url, sid2, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	_, dup := postWith(t, second, g.url, sid2, strings.Replace(charge, `"id":2`, `"id":3`, 1))
	got := <-answered
	for _, b := range []string{got, dup} {
		if !strings.Contains(b, "charged $49.00") {
			t.Fatalf("the call and its duplicate during the flood were answered %s and %s; want both charged\nlog:\n%s", got, dup, g.logText())
		}
	}
	if n := effectsOf(t, effects); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	jsonLines(t, g.logText())
}

// With --max-conns above what the open-file limit allows, accept fails for want of files:
// the HTTP server's complaint is one of effectfence's log lines (JSON with --log-format json),
// retried with a back-off, not a busy loop; the gateway serves again once the flood ends.
func TestAcceptFailuresAreLoggedAsEffectfence(t *testing.T) {
	t.Parallel()
	under := underFDLimit(t)
	g := startGatewayUnder(t, under, "--log-format", "json", "--max-conns", "100000", "--ledger", filepath.Join(t.TempDir(), "l.db"),
		"--listen", "127.0.0.1:0", "--", effectfence(t), "demo-server")
	conns := flood(t, g.url, 2*fdLimit)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(g.logText(), "too many open files") {
		if time.Now().After(deadline) {
			t.Fatalf("no accept failure logged with %d connections open under a limit of %d files\nlog:\n%s", len(conns), fdLimit, g.logText())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range conns {
		c.Close()
	}
	c := &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
	resp, err := c.Get(strings.TrimSuffix(g.url, "/mcp") + "/healthz")
	if err != nil {
		t.Fatalf("/healthz after the flood: %v\nlog:\n%s", err, g.logText())
	}
	resp.Body.Close()
	log := g.logText()
	jsonLines(t, log)
	if !strings.Contains(log, `effectfence wrap: http: Accept error`) || !strings.Contains(log, `"source":"effectfence"`) {
		t.Fatalf("the accept failure is not logged as effectfence's:\n%s", log)
	}
}

// postWith POSTs one JSON-RPC message with client c, on session sid if any.
func postWith(t *testing.T, c *http.Client, url, sid, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("POST %.80s: %v", body, err)
		return &http.Response{Header: http.Header{}}, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
