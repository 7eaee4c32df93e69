package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
)

// docs/gateway.md, --listen: a non-loopback address needs --api-keys or --pass-auth, and
// --pass-auth passes each client's Authorization to an upstream that authenticates users
// itself. A stdio server authenticates nobody: its sessions receive no Authorization at all,
// so --pass-auth there checks nothing and the gateway served every host that reached the
// address, a client with no credentials included. It must refuse to start, as it does
// without --pass-auth. Against the real binary: when it serves, a client without
// Authorization reaches it through the machine's own non-loopback address and charges.
func TestPassAuthWithAStdioServerIsNoAuthentication(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	bin := effectfence(t)
	cmd := exec.Command(bin, "wrap", "--ledger", "memory", "--listen", "0.0.0.0:0", "--pass-auth",
		"--", bin, "demo-server", "--latency", "1ms", "--effects", effects)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "EFFECTFENCE_API_KEYS=")
	errb := &syncbuf.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	exited := false
	for deadline := time.Now().Add(time.Minute); !exited && !strings.Contains(errb.String(), "listening on"); {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway neither refused to start nor listened within a minute:\n%s", errb.String())
		}
		select {
		case <-done:
			exited = true
			done <- nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	log := errb.String()
	if !exited {
		_, addr, _ := strings.Cut(log, "listening on http://")
		addr, _, _ = strings.Cut(addr, "/mcp")
		_, port, _ := net.SplitHostPort(addr)
		g := &gatewayProc{url: "http://" + net.JoinHostPort(nonLoopbackIPv4(t), port) + "/mcp"}
		body := g.charge(t, "")
		t.Fatalf("--listen 0.0.0.0 --pass-auth with a stdio server served a client that sent no credentials: %d execution(s), answer %.200s\n%s", effectsOf(t, effects), body, log)
	}
	if cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(log, "--pass-auth") || !strings.Contains(log, "--upstream") {
		t.Fatalf("exit %d; want exit %d and a message that --pass-auth authenticates only with --upstream:\n%s", cmd.ProcessState.ExitCode(), exitUsage, log)
	}
	if n := effectsOf(t, effects); n != 0 {
		t.Fatalf("%d executions", n)
	}
}

// nonLoopbackIPv4 is one of this machine's IPv4 addresses other than loopback (the test is
// skipped when it has none).
func nonLoopbackIPv4(t *testing.T) string {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("skipped: this machine has no address but loopback")
	return ""
}
