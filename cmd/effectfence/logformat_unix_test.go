//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docs/gateway.md, --log-format json: with --listen, every line on stderr is one JSON object
// (time, level, source, msg), effectfence's own lines marked as such, from the first line to
// the stop's counters.
func TestGatewayLogFormatJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lg := startJSONLogGateway(t, filepath.Join(dir, "l.db"), effectfence(t), "demo-server", "--latency", "1ms", "--effects", filepath.Join(dir, "effects"))
	g := &gatewayProc{cmd: lg.cmd, url: lg.url}
	g.charge(t, "")
	lg.stop(t)
	stopped := false
	for _, r := range lg.recs {
		if _, err := time.Parse(time.RFC3339Nano, r.Time); err != nil || (r.Level != "info" && r.Level != "warn") || r.Msg == "" {
			t.Fatalf("a malformed record: %+v", r)
		}
		if strings.HasPrefix(r.Msg, "effectfence") && r.Source != "effectfence" {
			t.Fatalf("effectfence's line marked %q: %+v", r.Source, r)
		}
		stopped = stopped || strings.Contains(r.Msg, "since boot: admitted=1")
	}
	if !stopped {
		t.Fatalf("no counters line at the stop: %q", lg.raw)
	}
}

// A hostile MCP server's stderr cannot pass for effectfence's lines under --log-format json:
// the source is who wrote a line, not what it says. Real children (a shell that writes to its
// stderr, then runs the demo server) print lines starting "effectfence wrap:", a forged
// counters line and a whole forged JSON record; each is the server's. Two children writing
// half a line each at the same time still give whole lines, one record per child's line.
func TestServerStderrCannotForgeEffectfenceLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := effectfence(t)
	script := `printf '%s\n' 'effectfence wrap: intent 0123abcd is unknown: forged' 'effectfence since boot: admitted=9 forged' '{"time":"2026-01-01T00:00:00Z","level":"warn","source":"effectfence","msg":"effectfence wrap: forged record"}' >&2
printf 'effectfence wrap: part-one-%s ' "$$" >&2; sleep 0.5; printf 'part-two-%s\n' "$$" >&2
exec "$0" demo-server --latency 1ms --effects "$1"`
	lg := startJSONLogGateway(t, filepath.Join(dir, "l.db"), "sh", "-c", script, bin, filepath.Join(dir, "effects"))
	u := lg.url
	// Two sessions at once: two children whose half lines overlap in time.
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("initialize: %d", resp.StatusCode)
				}
			}
			errs <- err
		}()
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	lg.stop(t)
	whole := regexp.MustCompile(`^effectfence wrap: part-one-(\d+) part-two-(\d+)$`)
	forged, halves, ours := 0, 0, 0
	for _, r := range lg.recs {
		switch {
		case strings.HasPrefix(r.Msg, "effectfence wrap: ledger "):
			// effectfence's line naming the command, which quotes the script: one line
			if r.Source != "effectfence" || !strings.Contains(r.Msg, "one child per session") {
				t.Errorf("the line naming the command: %+v", r)
			}
		case strings.Contains(r.Msg, "forged"):
			forged++
			if r.Source != "server" || r.Level != "info" {
				t.Errorf("a line of the server's labelled %s/%s: %q", r.Source, r.Level, r.Msg)
			}
		case strings.Contains(r.Msg, "part-"):
			halves++
			m := whole.FindStringSubmatch(r.Msg)
			if m == nil || m[1] != m[2] || r.Source != "server" {
				t.Errorf("a child's line mixed with another's or mislabelled (%s): %q", r.Source, r.Msg)
			}
		case strings.HasPrefix(r.Msg, "effectfence wrap: listening on "), strings.Contains(r.Msg, "since boot: admitted=0"):
			ours++
			if r.Source != "effectfence" {
				t.Errorf("effectfence's own line labelled %s: %q", r.Source, r.Msg)
			}
		}
	}
	if forged != 6 || halves != 2 || ours != 2 {
		t.Fatalf("%d forged lines (want 3 from each child), %d half-line pairs (want 2), %d of effectfence's own (want 2): %q", forged, halves, ours, lg.raw)
	}
}

// logRecord is one line of --log-format json.
type logRecord struct{ Time, Level, Source, Msg string }

// jsonLogGateway is a real `wrap --log-format json --listen` process whose stderr is read
// into records.
type jsonLogGateway struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
	recs []logRecord // read once done is closed
	raw  []string
}

// startJSONLogGateway starts the gateway over the server command argv and waits for its URL.
func startJSONLogGateway(t *testing.T, ledger string, argv ...string) *jsonLogGateway {
	t.Helper()
	cmd := exec.Command(effectfence(t), append([]string{"wrap", "--log-format", "json", "--ledger", ledger, "--listen", "127.0.0.1:0", "--"}, argv...)...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "EFFECTFENCE_API_KEYS=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	g := &jsonLogGateway{cmd: cmd, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		defer close(g.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			g.raw = append(g.raw, sc.Text())
			var r logRecord
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				g.recs = append(g.recs, r)
				if u, ok := strings.CutPrefix(r.Msg, "effectfence wrap: listening on "); ok {
					urls <- u
				}
			}
		}
	}()
	select {
	case g.url = <-urls:
	case <-g.done:
		t.Fatalf("the gateway exited: %q", g.raw)
	case <-time.After(60 * time.Second):
		t.Fatal("the gateway did not start")
	}
	return g
}

// stop ends the gateway with SIGTERM and checks that every line it wrote was a JSON record.
func (g *jsonLogGateway) stop(t *testing.T) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-g.done
	_ = g.cmd.Wait()
	if len(g.recs) != len(g.raw) {
		t.Fatalf("%d of %d stderr lines are not JSON records: %q", len(g.raw)-len(g.recs), len(g.raw), g.raw)
	}
}
