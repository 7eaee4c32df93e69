package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestRefusalAfterAKilledWrapSaysWhenTheClearGoesThrough: wrap killed with SIGKILL mid-call
// leaves the claim unknown with its lease running, and the next wrap refuses its duplicate
// with the commands to run. The clear it names is refused until the lease lapses, so the
// refusal must say until when (it named the clear alone, and the operator who ran it at once,
// as told, was refused). On PostgreSQL the lease runs by the database's clock, by which clear
// judges it: with that clock a day behind this host's the refusal left "refused until" out
// while clear was refused, and a day ahead it said so of a clear that went through (before
// 2026-12-07: wrap judged the lease by the host's clock).
func TestRefusalAfterAKilledWrapSaysWhenTheClearGoesThrough(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		shift time.Duration // of the database's clock (PostgreSQL); 0: a SQLite ledger
		lease string        // the wraps' --lease-secs
		runs  bool          // the lease runs by the ledger's clock when the duplicate comes
	}{
		{"sqlite", 0, "60", true},
		{"postgres-behind", -24 * time.Hour, "3600", true},
		{"postgres-ahead", 24 * time.Hour, "1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			killedWrapRefusal(t, c.shift, c.lease, c.runs)
		})
	}
}

func killedWrapRefusal(t *testing.T, shift time.Duration, lease string, runs bool) {
	bin := effectfence(t)
	dir := t.TempDir()
	ledger, effects := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "effects")
	if shift != 0 {
		ledger = pgLedgerWithClock(t, shift)
	}
	start := func() (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
		return startWrapSession(t, dir, "--ledger", ledger, "--lease-secs", lease, "--", bin, "demo-server", "--latency", "1m", "--effects", effects)
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}`
	first, in, _ := start()
	fmt.Fprintln(in, call)
	claim := waitOneClaim(t, ledger)
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if shift != 0 {
		// The store reads the database's clock unqualified (clock_timestamp()): were it
		// pg_catalog's, the lease would be this host's time and the case would prove nothing.
		if off := time.Until(claim.LeaseUntil); shift < 0 && off > shift/2 || shift > 0 && off < shift/2 {
			t.Fatalf("the claim's lease ends %s from now: the database's clock, shifted by %s, is not the one the store read", off, shift)
		}
	}
	if !runs {
		for !dbNow(t, ledger).After(claim.LeaseUntil) { // the lease lapses by the database's clock
			time.Sleep(50 * time.Millisecond)
		}
	}

	_, in, sc := start()
	fmt.Fprintln(in, call)
	if !sc.Scan() {
		t.Fatal("no answer to the duplicate")
	}
	text, meta := toolText(t, sc.Bytes())
	if meta["effectfence/code"] != fence.CodePriorFailure {
		t.Fatalf("the duplicate was not refused as prior_failure: %s", text)
	}
	intent, _ := meta["effectfence/intent"].(string)
	const say = "The clear is refused until "
	i := strings.Index(text, say)
	if !runs {
		if i >= 0 {
			t.Fatalf("the claim's lease lapsed by the ledger's clock, but the refusal says the clear is refused until it does:\n%s", text)
		}
		if code, _, errOut := runCLI(t, "", "ledger", "clear", intent, "--reason", "checked", "--ledger", ledger); code != exitOK {
			t.Fatalf("clear after the lease = %d %s", code, errOut)
		}
		return
	}
	if i < 0 {
		t.Fatalf("the refusal does not say when its clear goes through:\n%s", text)
	}
	until, err := time.Parse(time.RFC3339, strings.Fields(text[i+len(say):])[0][:len("2006-01-02T15:04:05Z")])
	if err != nil || !until.Equal(claim.LeaseUntil.Truncate(time.Second)) {
		t.Fatalf("the refusal names %v (%v), not the claim's lease, %s:\n%s", until, err, claim.LeaseUntil, text)
	}
	// As it says: the clear it names is refused now.
	if code, _, errOut := runCLI(t, "", "ledger", "clear", intent, "--reason", "checked", "--ledger", ledger); code != exitError || !strings.Contains(errOut, "runs until "+until.Format(time.RFC3339)) {
		t.Fatalf("clear within the lease = %d %s", code, errOut)
	}
}

// startWrapSession starts the binary's wrap with args in dir and initializes a session: its
// stdin and a scanner of its answers. The process is killed when the test ends.
func startWrapSession(t *testing.T, dir string, args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(effectfence(t), append([]string{"wrap"}, args...)...)
	cmd.Dir = dir
	in, sc := startLines(t, cmd)
	fmt.Fprintln(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if !sc.Scan() {
		t.Fatal("no answer to initialize")
	}
	fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return cmd, in, sc
}

// waitOneClaim waits until the ledger at path holds one claim in flight, and returns it.
func waitOneClaim(t *testing.T, path string) fence.Record {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := runBinary(t, nil, "", "ledger", "ls", "--ledger", path, "--state", "in_flight", "--json")
		var ls struct{ Records []fence.Record }
		if json.Unmarshal([]byte(r.stdout), &ls) == nil && len(ls.Records) == 1 {
			return ls.Records[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call never reached the ledger: %s%s", r.stdout, r.stderr)
		}
	}
}

// toolText is the text and _meta of the tool result in the JSON-RPC answer line.
func toolText(t *testing.T, line []byte) (string, map[string]any) {
	t.Helper()
	var resp struct {
		Result struct {
			Content []struct{ Text string }
			Meta    map[string]any `json:"_meta"`
		}
	}
	if err := json.Unmarshal(line, &resp); err != nil || len(resp.Result.Content) == 0 {
		t.Fatalf("not a tool result: %v %s", err, line)
	}
	return resp.Result.Content[0].Text, resp.Result.Meta
}

// startLines starts cmd with pipes to its stdin and from its stdout (lines up to 1 MiB), and
// kills it when the test ends.
func startLines(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	return in, sc
}
