package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
)

// TestHealthzFollowsTheLedger: /healthz answers 200 while the gateway's ledger answers, 503
// naming the ledger while it does not (its PostgreSQL connections cut by a real TCP proxy),
// and 200 again once it is back (docs/gateway.md). Only the 200 was tested before.
func TestHealthzFollowsTheLedger(t *testing.T) {
	u, err := url.Parse(pgLedger(t))
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if _, _, err := net.SplitHostPort(target); err != nil {
		target = net.JoinHostPort(target, "5432")
	}
	p, err := netcut.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	u.Host = p.Addr()
	bin := effectfence(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "wrap", "--ledger", u.String(), "--listen", "127.0.0.1:0",
		"--", bin, "demo-server", "--effects", filepath.Join(dir, "effects"))
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if mcp, ok := strings.CutPrefix(sc.Text(), "effectfence wrap: listening on "); ok {
				urls <- mcp
			}
		}
	}()
	var health string
	select {
	case mcp := <-urls:
		health = strings.TrimSuffix(mcp, "/mcp") + "/healthz"
	case <-time.After(60 * time.Second):
		t.Fatal("the gateway did not start")
	}
	get := func() (int, string) {
		t.Helper()
		resp, err := http.Get(health)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != http.StatusOK || !strings.HasPrefix(body, "ok ") {
		t.Fatalf("healthz with the ledger up: %d %s", code, body)
	}
	p.Cut(time.Hour)
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "ledger not answering") {
		t.Fatalf("healthz with the ledger cut: %d %s", code, body)
	}
	p.Heal()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get()
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz once the ledger was back: %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
