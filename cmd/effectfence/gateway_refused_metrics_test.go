package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The tools/calls the HTTP front refuses itself, before a session's proxy sees them, are
// counted in /metrics as invalid, as the proxy's own refusals are: against the real binary, a
// charge whose Mcp-Name names another tool (400, -32020) and one sent under the id of a charge
// still running (400) each add one to effectfence_tool_calls_total{outcome="invalid"} and to
// the charge tool's own series, and neither runs. Before 2026-12-07 the front told the metrics
// nothing: both stayed at zero while every such call was refused.
func TestGatewayCountsTheCallsItsFrontRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	g := startGateway(t, "--ledger", filepath.Join(dir, "l.db"), "--listen", "127.0.0.1:0", "--metrics-tool", "charge_card",
		"--", effectfence(t), "demo-server", "--latency", "3s", "--effects", effects)
	sid := g.initialize(t)
	base := "Content-Type: application/json\r\nAccept: application/json\r\nMcp-Session-Id: " + sid + "\r\n"

	// Headers that name another tool than the body's.
	charge := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}`
	if code, body := rawRequest(t, g.url, "POST", base+"Mcp-Method: tools/call\r\nMcp-Name: book_seat\r\n", charge); code != http.StatusBadRequest || !strings.Contains(body, "-32020") {
		t.Fatalf("a charge whose Mcp-Name names book_seat: %d %s, want 400 and -32020", code, body)
	}

	// Another request under the id of a charge the session still serves. The first charge is
	// registered once its SSE answer has begun (its head arrives before the result); a round
	// whose first charge ended before the second was read (the id then free again) is run
	// again with another charge.
	rounds := 0
	for refused := false; !refused; {
		rounds++
		if rounds > 5 {
			t.Fatalf("in %d rounds no request was refused for an id still in progress", rounds-1)
		}
		first := fmt.Sprintf(`{"jsonrpc":"2.0","id":"held","method":"tools/call","params":{"name":"charge_card","arguments":{"amount":%d}}}`, 100+rounds)
		req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(first))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("first charge: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		// The same id (spelled otherwise) and another body: never handed the first's answer.
		other := fmt.Sprintf(`{"jsonrpc":"2.0","id":"\u0068eld","method":"tools/call","params":{"name":"charge_card","arguments":{"amount":%d}}}`, 200+rounds)
		code, body := rawRequest(t, g.url, "POST", base, other)
		switch {
		case code == http.StatusBadRequest && strings.Contains(body, "already in progress"):
			refused = true
		case code == http.StatusOK && strings.Contains(body, `"result"`):
			// The first charge had ended: the id was free and this one was a new call.
		default:
			t.Fatalf("a charge under the id of one in progress: %d %s", code, body)
		}
		all, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(all), `"result"`) {
			t.Fatalf("the first charge's answer: %s", all)
		}
	}

	metrics := scrapeMetrics(t, g.url)
	for series, want := range map[string]int{
		`effectfence_tool_calls_total{code="none",outcome="invalid"}`:                2,
		`effectfence_tool_calls_by_tool_total{outcome="invalid",tool="charge_card"}`: 2,
	} {
		if got := metricOf(t, metrics, series); got != want {
			t.Errorf("%s is %d, want %d (the two calls the front refused):\n%s", series, got, want, metrics)
		}
	}
	// Each round ran its first charge (and a second only when the first had ended): the
	// refused calls ran nothing.
	if n := effectsOf(t, effects); n != 2*rounds-1 {
		t.Fatalf("%d charges ran in %d rounds, want %d: a refused call ran", n, rounds, 2*rounds-1)
	}
}

// scrapeMetrics returns the gateway's /metrics text.
func scrapeMetrics(t *testing.T, gwURL string) string {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(gwURL, "/mcp") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// metricOf is the value of one series of a /metrics text (0 when it is absent).
func metricOf(t *testing.T, metrics, series string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return int(v)
}
