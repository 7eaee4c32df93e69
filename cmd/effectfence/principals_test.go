package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/demo"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// gatewayProc is a running `effectfence wrap --listen` (the real binary) and its log.
type gatewayProc struct {
	url string
	cmd *exec.Cmd
	mu  sync.Mutex
	log bytes.Buffer
}

func (g *gatewayProc) logText() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
}

// startGateway runs `effectfence wrap ARGS` (which must include --listen 127.0.0.1:0) until the
// test ends and returns it once it listens.
func startGateway(t *testing.T, args ...string) *gatewayProc {
	t.Helper()
	return startGatewayUnder(t, nil, args...)
}

// startGatewayUnder is startGateway with the binary run by the command under (prlimit and its
// options, say), which must exec it.
func startGatewayUnder(t *testing.T, under []string, args ...string) *gatewayProc {
	t.Helper()
	argv := append(append(append([]string(nil), under...), effectfence(t), "wrap"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "EFFECTFENCE_API_KEYS=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{cmd: cmd}
	urls := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			g.mu.Lock()
			g.log.WriteString(sc.Text() + "\n")
			g.mu.Unlock()
			// A text line, or the msg of a JSON one (--log-format json).
			if _, u, ok := strings.Cut(sc.Text(), "effectfence wrap: listening on "); ok {
				urls <- strings.TrimSuffix(u, `"}`)
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-done
		if strings.Contains(g.logText(), "DATA RACE") {
			t.Errorf("race in the gateway:\n%s", g.logText())
		}
	})
	select {
	case g.url = <-urls:
	case <-done:
		t.Fatalf("the gateway exited: %s", g.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("the gateway did not start: %s", g.logText())
	}
	return g
}

// post sends one JSON-RPC message with the bearer token (if any) on the session (if any) and
// returns the response and its body.
func (g *gatewayProc) post(t *testing.T, token, sid, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(body))
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
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

// charge opens a session with token and calls the demo server's charge_card once; it returns
// the answer's body.
// initialize opens a session (initialize, then notifications/initialized) and returns its id.
func (g *gatewayProc) initialize(t *testing.T) string {
	t.Helper()
	resp, body := g.post(t, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	g.post(t, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}

// postAsync posts body in session sid without waiting: the channel gets what the answer's
// body held when it ended, whole or cut (the gateway killed mid-answer), or "no answer: …".
func (g *gatewayProc) postAsync(sid, body string) <-chan string {
	out := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(body))
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- "no answer: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body) // what arrived, also when the body was cut
		out <- string(b)
	}()
	return out
}

func (g *gatewayProc) charge(t *testing.T, token string) string {
	t.Helper()
	resp, body := g.post(t, token, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s; log:\n%s", resp.StatusCode, body, g.logText())
	}
	g.post(t, token, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp, body = g.post(t, token, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_1"}}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"result"`) || strings.Contains(body, `"isError":true`) {
		t.Fatalf("charge_card: %d %s; log:\n%s", resp.StatusCode, body, g.logText())
	}
	return body
}

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
)

func keysFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("alice %s\nbob %s\n", aliceToken, bobToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func effectsOf(t *testing.T, path string) int {
	t.Helper()
	n, err := demo.CountEffects(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return n
}

// docs/gateway.md: the principal (an API key's name) is combined with the scope, named or
// derived, so alice's and bob's identical calls are two actions under one --scope; with
// --share-principals they are one action, and bob receives alice's recorded result. Each
// principal's own duplicate is replayed either way. Against the real binary and its demo
// server.
func TestGatewayPrincipalsAndSharedPrincipals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		flags []string
		want  int // executions for alice's and bob's identical calls
	}{
		{"each principal its own scope", nil, 2},
		{"shared principals", []string{"--share-principals"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			effects := filepath.Join(dir, "effects")
			args := append([]string{"--ledger", filepath.Join(dir, "l.db"), "--listen", "127.0.0.1:0", "--scope", "shop", "--api-keys", keysFile(t)}, c.flags...)
			g := startGateway(t, append(args, "--", effectfence(t), "demo-server", "--latency", "1ms", "--effects", effects)...)
			// /healthz and /metrics are not behind the keys (scrapers rarely carry them); /mcp is.
			for _, path := range []string{"/healthz", "/metrics"} {
				resp, err := http.Get(strings.TrimSuffix(g.url, "/mcp") + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s without a key: status %d, want 200", path, resp.StatusCode)
				}
			}
			if resp, _ := g.post(t, "", "", `{"jsonrpc":"2.0","id":1,"method":"ping"}`); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("/mcp without a key: status %d, want 401", resp.StatusCode)
			}
			first := g.charge(t, aliceToken)
			if strings.Contains(first, "effectfence/replayed") {
				t.Fatalf("alice's first call was a replay: %s", first)
			}
			bob := g.charge(t, bobToken)
			if got := effectsOf(t, effects); got != c.want {
				t.Fatalf("alice's and bob's identical calls ran %d times, want %d; bob got %s", got, c.want, bob)
			}
			if replayed := strings.Contains(bob, "effectfence/replayed"); replayed != (c.want == 1) {
				t.Fatalf("bob's answer (replayed %v, want %v): %s", replayed, c.want == 1, bob)
			}
			if again := g.charge(t, aliceToken); !strings.Contains(again, "effectfence/replayed") || effectsOf(t, effects) != c.want {
				t.Fatalf("alice's duplicate: %s, %d executions", again, effectsOf(t, effects))
			}
			if l := g.logText(); strings.Contains(l, aliceToken) || strings.Contains(l, bobToken) {
				t.Fatalf("a token reached the log:\n%s", l)
			}
		})
	}
}

// docs/gateway.md, --pass-auth: each client's own Authorization goes to the upstream (over a
// configured --upstream-header of the same name) and a hash of it is the principal, so two
// clients' identical calls are two actions and one client's duplicate is replayed. The
// upstream is a second real gateway that demands bearer keys and passes charge_card through
// unfenced, so its demo server's effects count what the first gateway sent; it answers 401 to
// any other token. No token reaches the first gateway's log.
func TestGatewayPassAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	up := startGateway(t, "--ledger", "memory", "--listen", "127.0.0.1:0", "--api-keys", keysFile(t), "--pass", "charge_card",
		"--", effectfence(t), "demo-server", "--latency", "1ms", "--effects", effects)
	g := startGateway(t, "--ledger", filepath.Join(dir, "l.db"), "--listen", "127.0.0.1:0", "--pass-auth",
		"--upstream-header", "Authorization: Bearer nobody-token-0123456789", "--upstream", up.url)
	if first := g.charge(t, aliceToken); strings.Contains(first, "effectfence/replayed") || effectsOf(t, effects) != 1 {
		t.Fatalf("alice's call: %s, %d executions", first, effectsOf(t, effects))
	}
	if bob := g.charge(t, bobToken); strings.Contains(bob, "effectfence/replayed") || effectsOf(t, effects) != 2 {
		t.Fatalf("bob's identical call is another principal's action: %s, %d executions", bob, effectsOf(t, effects))
	}
	if again := g.charge(t, aliceToken); !strings.Contains(again, "effectfence/replayed") || effectsOf(t, effects) != 2 {
		t.Fatalf("alice's duplicate: %s, %d executions", again, effectsOf(t, effects))
	}
	if l := g.logText(); strings.Contains(l, aliceToken) || strings.Contains(l, bobToken) || strings.Contains(l, "nobody-token") {
		t.Fatalf("a token reached the log:\n%s", l)
	}
}

// docs/gateway.md: an upstream that wants a token gets it from EFFECTFENCE_UPSTREAM_HEADERS
// (one `Name: value` per line) or --upstream-header; values are never logged. The upstream is
// a real gateway that demands bearer keys and passes charge_card through, so its demo
// server's effects count what reached it; a stdio wrap without the header is refused by it
// (401) and nothing runs.
func TestUpstreamHeadersFromEnvAndFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	up := startGateway(t, "--ledger", "memory", "--listen", "127.0.0.1:0", "--api-keys", keysFile(t), "--pass", "charge_card",
		"--", effectfence(t), "demo-server", "--latency", "1ms", "--effects", effects)
	for i, c := range []struct {
		name  string
		env   string
		flags []string
		ok    bool
	}{
		{"no header", "", nil, false},
		{"the variable", "X-Request-Source: test\nAuthorization: Bearer " + aliceToken + "\n", nil, true},
		{"the flag", "", []string{"--upstream-header", "Authorization: Bearer " + bobToken}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := effectsOf(t, effects)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			log := &syncbuf.Buffer{}
			argv := append([]string{effectfence(t), "wrap", "--ledger", "memory", "--upstream", up.url}, c.flags...)
			s, err := mcpstdio.Start(ctx, mcpstdio.Config{
				Command: argv, Env: append(os.Environ(), "GORACE=atexit_sleep_ms=0", envUpstreamHeaders+"="+c.env), Stderr: log, InitTimeout: time.Minute,
			})
			if !c.ok {
				if err == nil {
					s.Close()
				}
				if err == nil || !strings.Contains(err.Error(), "401") || effectsOf(t, effects) != before {
					t.Fatalf("without the header: %v, %d executions; want the upstream's 401 and none", err, effectsOf(t, effects)-before)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, log.String())
			}
			defer s.Close()
			res, err := s.CallTool(ctx, "charge_card", json.RawMessage(fmt.Sprintf(`{"amount":%d}`, 100+i)))
			if err != nil || strings.Contains(string(res), `"isError":true`) || effectsOf(t, effects) != before+1 {
				t.Fatalf("charge_card: %s %v, %d executions; wrap log:\n%s", res, err, effectsOf(t, effects)-before, log.String())
			}
			s.Close()
			if l := log.String(); strings.Contains(l, aliceToken) || strings.Contains(l, bobToken) {
				t.Fatalf("a token reached wrap's log:\n%s", l)
			}
		})
	}
}
