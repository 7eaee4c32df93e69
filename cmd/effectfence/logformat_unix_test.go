//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
	cmd := exec.Command(effectfence(t), "wrap", "--log-format", "json", "--ledger", filepath.Join(dir, "l.db"), "--listen", "127.0.0.1:0",
		"--", effectfence(t), "demo-server", "--latency", "1ms", "--effects", filepath.Join(dir, "effects"))
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "EFFECTFENCE_API_KEYS=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	type record struct{ Time, Level, Source, Msg string }
	var recs []record
	var raw []string
	urls := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			raw = append(raw, sc.Text())
			var r record
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				recs = append(recs, r)
				if u, ok := strings.CutPrefix(r.Msg, "effectfence wrap: listening on "); ok {
					urls <- u
				}
			}
		}
	}()
	g := &gatewayProc{cmd: cmd}
	select {
	case g.url = <-urls:
	case <-done:
		t.Fatalf("the gateway exited: %q", raw)
	case <-time.After(60 * time.Second):
		t.Fatal("the gateway did not start")
	}
	g.charge(t, "")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-done
	_ = cmd.Wait()
	if len(recs) != len(raw) {
		t.Fatalf("%d of %d stderr lines are not JSON records: %q", len(raw)-len(recs), len(raw), raw)
	}
	stopped := false
	for _, r := range recs {
		if _, err := time.Parse(time.RFC3339Nano, r.Time); err != nil || (r.Level != "info" && r.Level != "warn") || r.Msg == "" {
			t.Fatalf("a malformed record: %+v", r)
		}
		if strings.HasPrefix(r.Msg, "effectfence") && r.Source != "effectfence" {
			t.Fatalf("effectfence's line marked %q: %+v", r.Source, r)
		}
		stopped = stopped || strings.Contains(r.Msg, "since boot: admitted=1")
	}
	if !stopped {
		t.Fatalf("no counters line at the stop: %q", raw)
	}
}
