package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// docs/gateway.md, --allow-origin: requests carrying an Origin not allowed are refused with
// 403, and on a loopback listener so are requests whose Host is not a loopback name (DNS
// rebinding protection). /healthz and /metrics are not behind the API keys, so that check is
// all that keeps a page rebound to 127.0.0.1 from reading them (session counts, the ledger's
// error, per-tool counters); before 2026-12-04 they answered it. A scraper on the host (no
// Origin, Host 127.0.0.1:PORT or localhost) is served.
func TestRebindingRefusedOnEveryEndpoint(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "--ledger", filepath.Join(t.TempDir(), "l.db"), "--listen", "127.0.0.1:0", "--metrics-tool", "charge_card",
		"--", effectfence(t), "demo-server", "--effects", filepath.Join(t.TempDir(), "effects"))
	base := strings.TrimSuffix(g.url, "/mcp")
	get := func(path, host, origin string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/healthz", "/metrics", "/mcp"} {
		if code, body := get(path, "rebound.example", ""); code != http.StatusForbidden || strings.Contains(body, "effectfence_") || strings.Contains(body, "sessions") {
			t.Errorf("GET %s with Host rebound.example: %d %.200s; want 403", path, code, body)
		}
		if code, body := get(path, "", "https://evil.example"); code != http.StatusForbidden || strings.Contains(body, "effectfence_") || strings.Contains(body, "sessions") {
			t.Errorf("GET %s with Origin https://evil.example: %d %.200s; want 403", path, code, body)
		}
	}
	_, port, _ := strings.Cut(strings.TrimPrefix(base, "http://"), ":")
	for _, host := range []string{"", "localhost:" + port} {
		if code, body := get("/healthz", host, ""); code != http.StatusOK || !strings.HasPrefix(body, "ok ") {
			t.Errorf("GET /healthz (Host %q): %d %s; want 200", host, code, body)
		}
		if code, body := get("/metrics", host, ""); code != http.StatusOK || !strings.Contains(body, "effectfence_sessions_open") {
			t.Errorf("GET /metrics (Host %q): %d %.200s; want 200", host, code, body)
		}
	}
}
