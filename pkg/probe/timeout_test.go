package probe_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// TestProbeCallsThatTimeOut: calls unanswered within --timeout are transport failures that
// "may still have run", never refusals, so one success does not read as "no race surface";
// and the probe ends soon after the timeout although the server never answers.
func TestProbeCallsThatTimeOut(t *testing.T) {
	t.Parallel()
	// Answers its first call and never another.
	srv := shServer(t, t.TempDir(), "hangs.sh", `      [ "$n" -gt 1 ] && exec sleep 600
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"done"}]}}\n' "$id"`)
	start := time.Now()
	r := cmdtest.Run(t, nil, bin, "probe", "--json", "--timeout", "1s", "--tool", "t", "--calls", "3", "--", srv)
	took := time.Since(start)
	rep := probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.Inconclusive || rep.Succeeded != 1 || rep.TransportFailures != 2 ||
		len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0].Message, "no answer within 1s (the call may still have run)") {
		t.Fatalf("exit %d, report %+v\nstderr:\n%s", r.Code, rep, r.Stderr)
	}
	if took > 20*time.Second {
		t.Errorf("the probe took %s with --timeout 1s", took)
	}
}

// TestProbeRetryBeforeAnswer: with --retry-after shorter than the tool takes, each call is
// sent again while the previous one still runs; the report counts those and every answer.
func TestProbeRetryBeforeAnswer(t *testing.T) {
	t.Parallel()
	file, counter := effects(t)
	r := cmdtest.Run(t, nil, bin, "probe", "--json", "--pattern", "retry", "--retry-after", "20ms", "--tool", "charge_card",
		"--args", `{"amount":4900}`, "--calls", "3", "--witness", counter, "--witness-kind", "executions",
		"--", bin, "demo-server", "--effects", file, "--latency", "400ms")
	rep := probeJSON(t, r)
	if r.Code != 3 || rep.Verdict != probe.DoubleFire || rep.RetriesBeforeAnswer != 2 || rep.Succeeded != 3 || rep.Witness.Effects != 3 ||
		!strings.Contains(strings.Join(rep.Notes, " "), "2 call(s) were sent again before the previous one had answered") {
		t.Fatalf("exit %d, report %+v witness %+v\nstderr:\n%s", r.Code, rep, rep.Witness, r.Stderr)
	}
}

// TestProbeRetryStopsAtTheTimeout: in the retry pattern, calls whose turn comes after --timeout
// are not sent (they used to go out all at once, a storm nobody asked for), and the report
// counts them apart from the calls that were sent and got no answer.
func TestProbeRetryStopsAtTheTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	// Appends a line per call to $EFFECTS and never answers one.
	srv := shServer(t, dir, "mute.sh", `      echo call >> "$EFFECTS"`)
	r := cmdtest.Run(t, []string{"EFFECTS=" + log}, bin, "probe", "--json", "--pattern", "retry", "--retry-after", "300ms", "--timeout", "1s",
		"--tool", "t", "--calls", "8", "--", srv)
	rep := probeJSON(t, r)
	if r.Code != 1 || rep.NotSent < 2 || rep.TransportFailures+rep.NotSent != 8 ||
		!strings.Contains(strings.Join(rep.Notes, " "), "were not sent: --timeout passed before their turn") {
		t.Fatalf("exit %d, report %+v\nstderr:\n%s", r.Code, rep, r.Stderr)
	}
	if n := countLines(t, log); n != 8-rep.NotSent {
		t.Fatalf("the server received %d calls; the report says %d were sent", n, 8-rep.NotSent)
	}
}

// TestProbeTimeoutBoundsTheToolList: a server that completes the handshake and never answers
// tools/list ends the probe soon after --timeout, exit 1 and nothing called; the listing
// waited without a bound, and such a server held the probe until it was killed.
func TestProbeTimeoutBoundsTheToolList(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	srv := filepath.Join(dir, "nolist.sh")
	script := `#!/bin/sh
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([^,}]*\).*/\1/p')
  case "$line" in
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
    *'"tools/call"'*) echo call >> "$EFFECTS";;
  esac
done
`
	if err := os.WriteFile(srv, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := cmdtest.Run(t, []string{"EFFECTS=" + log}, bin, "probe", "--timeout", "1s", "--tool", "t", "--calls", "3", "--", srv)
	took := time.Since(start)
	if r.Code != 1 || !strings.Contains(r.Stderr, "tools/list") || !strings.Contains(r.Stderr, "nothing was called") {
		t.Fatalf("exit %d after %s\nstdout:\n%s\nstderr:\n%s", r.Code, took, r.Stdout, r.Stderr)
	}
	if took > 20*time.Second {
		t.Errorf("the probe took %s with --timeout 1s", took)
	}
	if _, err := os.Stat(log); err == nil {
		t.Error("a tools/call was sent to a server whose tool list never came")
	}
}

// TestProbeTextCountsOnlyTheCallsSent: the text report's "sent" row is the number of calls the
// server received; it showed --calls, the calls whose turn never came included, beside a row
// that counted those as not sent.
func TestProbeTextCountsOnlyTheCallsSent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	srv := shServer(t, dir, "mute.sh", `      echo call >> "$EFFECTS"`)
	r := cmdtest.Run(t, []string{"EFFECTS=" + log}, bin, "probe", "--pattern", "retry", "--retry-after", "300ms", "--timeout", "1s",
		"--tool", "t", "--calls", "8", "--", srv)
	sent := regexp.MustCompile(`sent \(identical, one after another\)\s*│\s*(\d+)`).FindStringSubmatch(r.Stdout)
	notSent := regexp.MustCompile(`not sent \(--timeout passed first\)\s*│\s*(\d+)`).FindStringSubmatch(r.Stdout)
	if r.Code != 1 || sent == nil || notSent == nil {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	n := countLines(t, log)
	if sent[1] != strconv.Itoa(n) || notSent[1] != strconv.Itoa(8-n) {
		t.Fatalf("the server received %d calls; the report says sent %s, not sent %s\n%s", n, sent[1], notSent[1], r.Stdout)
	}
}
