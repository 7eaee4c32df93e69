package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/demo"
)

func TestListenUsageErrors(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("alice tooshort\n"), 0o600)
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("# keys\nalice\n"), 0o600)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"wrap", "--listen", "0.0.0.0:0", "--", "x"}, "not a loopback address"},
		{[]string{"wrap", "--api-keys", short, "--", "x"}, "--api-keys needs --listen"},
		{[]string{"wrap", "--listen", ":0", "--api-keys", short, "--", "x"}, "shorter than 16"},
		{[]string{"wrap", "--listen", ":0", "--api-keys", bad, "--", "x"}, bad + ":2: want `PRINCIPAL TOKEN`"},
		{[]string{"wrap", "--listen", ":0", "--api-keys", filepath.Join(dir, "none"), "--", "x"}, "no such file"},
		{[]string{"wrap", "--listen", "a:b:c", "--", "x"}, "want HOST:PORT"},
		{[]string{"wrap", "--listen", ":0", "--max-sessions", "0", "--", "x"}, "must be positive"},
		{[]string{"wrap", "--metrics-tool", "charge", "--", "x"}, "--metrics-tool needs --listen"},
		{[]string{"wrap", "--body-timeout", "5s", "--", "x"}, "--body-timeout needs --listen"},
		{[]string{"wrap", "--listen", ":0", "--body-timeout", "0s", "--", "x"}, "--body-timeout must be positive"},
	}
	t.Setenv("EFFECTFENCE_API_KEYS", "alice:tooshort")
	var out0, err0 bytes.Buffer
	if code := run(context.Background(), []string{"effectfence", "wrap", "--listen", ":0", "--", "x"}, streams{strings.NewReader(""), &out0, &err0}); code != exitUsage || !strings.Contains(err0.String(), "shorter than 16") || strings.Contains(err0.String(), "tooshort") {
		t.Errorf("inline keys: exit %d, stderr %q", code, err0.String())
	}
	// A path holding ':' (C:\keys on Windows) names a file when one is there, not pairs.
	colon := filepath.Join(dir, "keys:prod")
	os.WriteFile(colon, []byte("alice tooshort\n"), 0o600)
	t.Setenv("EFFECTFENCE_API_KEYS", colon)
	var out1, err1 bytes.Buffer
	if code := run(context.Background(), []string{"effectfence", "wrap", "--listen", ":0", "--", "x"}, streams{strings.NewReader(""), &out1, &err1}); code != exitUsage || !strings.Contains(err1.String(), colon+":1: the token of \"alice\" is shorter than 16") {
		t.Errorf("a keys file whose path holds ':': exit %d, stderr %q; want it read as the file", code, err1.String())
	}
	t.Setenv("EFFECTFENCE_API_KEYS", "")
	for _, c := range cases {
		var out, errw bytes.Buffer
		code := run(context.Background(), append([]string{"effectfence"}, c.args...), streams{strings.NewReader(""), &out, &errw})
		if code != exitUsage || !strings.Contains(errw.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errw.String(), exitUsage, c.want)
		}
		if strings.Contains(errw.String(), "tooshort") {
			t.Errorf("%v: a token reached stderr: %q", c.args, errw.String())
		}
	}
}

// SIGTERM to a gateway with a call in flight: no new sessions, the call finishes within the
// grace and is answered, the process exits 0, the call ran once.
func TestListenSIGTERMDrains(t *testing.T) {
	bin := effectfence(t)
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	ledger := filepath.Join(dir, "l.db")
	cmd := exec.Command(bin, "wrap", "--ledger", ledger, "--listen", "127.0.0.1:0", "--grace", "10s",
		"--", bin, "demo-server", "--latency", "1500ms", "--effects", effects)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	urls := make(chan string, 1)
	var logb bytes.Buffer
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logb.WriteString(sc.Text() + "\n")
			if u, ok := strings.CutPrefix(sc.Text(), "effectfence wrap: listening on "); ok {
				urls <- u
			}
		}
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(60 * time.Second):
		t.Fatal("the gateway did not start")
	}
	post := func(sid, body string) (*http.Response, string) {
		return postTo(t, url, sid, "application/json, text/event-stream", body)
	}
	resp, _ := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if h, err := http.Get(strings.TrimSuffix(url, "/mcp") + "/healthz"); err != nil || h.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", h, err)
	}
	mresp, err := http.Get(strings.TrimSuffix(url, "/mcp") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{"effectfence_sessions_open 1", `effectfence_http_requests_total{class="2xx",method="POST"}`, `effectfence_tool_calls_total{code="none",outcome="unknown"} 0`} {
		if !strings.Contains(string(mb), want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, mb)
		}
	}
	answer := make(chan string, 1)
	go func() {
		_, body := post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}`)
		answer <- body
	}()
	// Admitted (claimed in the ledger), the call is inside the server (latency 1.5 s).
	waitOneInFlight(t, ledger, func() string { return "" })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	body := <-answer
	if !strings.Contains(body, "ch_demo_0001") {
		t.Fatalf("the call in flight at SIGTERM was answered %q", body)
	}
	if err := cmd.Wait(); err != nil {
		<-logDone
		t.Fatalf("the gateway exited with %v:\n%s", err, logb.String())
	}
	if n, err := demo.CountEffects(effects); err != nil || n != 1 {
		t.Fatalf("executions: %d %v", n, err)
	}
}

func TestAPIKeysForms(t *testing.T) {
	keys, err := parseInlineKeys("alice:0123456789abcdef, bob:fedcba9876543210")
	if err != nil || keys["0123456789abcdef"] != "alice" || keys["fedcba9876543210"] != "bob" || len(keys) != 2 {
		t.Fatalf("inline keys: %v %v", keys, err)
	}
	for _, bad := range []string{"alice", ":0123456789abcdef", "a:0123456789abcdef,b:0123456789abcdef", " , "} {
		if _, err := parseInlineKeys(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	path := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(path, []byte("# principal token\n\nalice 0123456789abcdef\n  bob   fedcba9876543210  \n"), 0o600)
	keys, err = readAPIKeys(path)
	if err != nil || keys["0123456789abcdef"] != "alice" || keys["fedcba9876543210"] != "bob" {
		t.Fatalf("keys file: %v %v", keys, err)
	}
	for addr, want := range map[string]string{"8080": "127.0.0.1:8080", ":8080": "127.0.0.1:8080", "0.0.0.0:8080": "0.0.0.0:8080", "[::1]:9": "[::1]:9"} {
		if got, _, err := listenAddr(addr); err != nil || got != want {
			t.Errorf("--listen %s: %s %v, want %s", addr, got, err, want)
		}
	}
}
