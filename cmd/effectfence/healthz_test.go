package main

import (
	"io"
	"net/http"
	"net/url"
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
	p, u, _ := pgThrough(t, netcut.New)
	// The ledger's password (ignored by the test server's trust auth) must appear in no body
	// of this unauthenticated endpoint and no log line (docs/gateway.md, Security).
	const secret = "hunter2-ledger-secret"
	u.User = url.UserPassword(u.User.Username(), secret)
	var g *gatewayProc
	t.Cleanup(func() {
		if strings.Contains(g.logText(), secret) {
			t.Errorf("the ledger's password reached the gateway's log:\n%s", g.logText())
		}
	})
	g = startGateway(t, "--ledger", u.String(), "--listen", "127.0.0.1:0",
		"--", effectfence(t), "demo-server", "--effects", filepath.Join(t.TempDir(), "effects"))
	health := strings.TrimSuffix(g.url, "/mcp") + "/healthz"
	get := func() (int, string) {
		t.Helper()
		resp, err := http.Get(health)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(b), secret) {
			t.Fatalf("/healthz shows the ledger's password: %s", b)
		}
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
	waitOK := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, body := get()
			if code == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("healthz once the ledger was back: %d %s", code, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitOK()
	// A ledger that holds every byte (a stopped database, a black-holed network): the check
	// gives up after its 2 s and answers 503, rather than hanging the load balancer's probe.
	p.Freeze()
	start := time.Now()
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "ledger not answering") || time.Since(start) > 5*time.Second {
		t.Fatalf("healthz with the ledger frozen: %d %s after %v; want 503 within about 2 s", code, body, time.Since(start))
	}
	p.Heal()
	waitOK()
}
