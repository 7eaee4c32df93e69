package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestScopeArgvAloneSeparatesServers is docs/identity.md's "the child's argv" and "Restarting
// the same configuration (same command, directory and environment) gives the same scope, so
// its receipts stay valid across restarts", with real processes: two wraps on one shared
// ledger file, in one directory and one environment, of one demo server whose data file is
// named in its command line (as `mcp-server-filesystem /srv/a` names its root). The two
// command lines are two servers: the identical charge runs on each, and neither is handed the
// other's receipt. The first command line started again is the same server: its duplicate is
// replayed and does not run.
func TestScopeArgvAloneSeparatesServers(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	ledger := filepath.Join(t.TempDir(), "shared.db")
	const session = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}` + "\n"
	wrapOf := func(effects string) (replayed bool, stderr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "wrap", "--grace", "60s", "--ledger", ledger, "--", bin, "demo-server", "--latency", "0s", "--effects", effects)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", store.EnvLedger+"=")
		cmd.Stdin = strings.NewReader(session)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil || !strings.Contains(out.String(), `"id":1`) || strings.Contains(out.String(), `"isError":true`) {
			t.Fatalf("wrap of the server on %s: %v\nstdout %s\nstderr %s", effects, err, out.String(), errb.String())
		}
		return strings.Contains(out.String(), `"effectfence/replayed":true`), errb.String()
	}
	executions := func(file string) int {
		b, _ := os.ReadFile(file)
		return strings.Count(string(b), "\n")
	}
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	if replayed, stderr := wrapOf(a); replayed || executions(a) != 1 {
		t.Fatalf("the charge on a: replayed %v, %d executions; want it run\n%s", replayed, executions(a), stderr)
	}
	if replayed, stderr := wrapOf(b); replayed || executions(b) != 1 {
		t.Errorf("the identical charge on b, a server whose command line alone differs: replayed %v, %d executions on b, %d on a; want it run on b (it was answered with a's receipt)\n%s",
			replayed, executions(b), executions(a), stderr)
	}
	if replayed, stderr := wrapOf(a); !replayed || executions(a) != 1 {
		t.Errorf("the duplicate on a after a restart of the same configuration: replayed %v, %d executions on a; want a replay and 1\n%s", replayed, executions(a), stderr)
	}
}
