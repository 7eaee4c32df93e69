package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerForReadsThePolicy: a policy file (EFFECTFENCE_POLICY, or --policy in the MCP
// config's args) may name wrap's scope and its ledger. `ledger --for -- <command>` run from the
// same shell setup must open the file wrap opened. Before, --for ignored the policy and opened
// the derived scope's default file: with EFFECTFENCE_POLICY set it showed the ledger of an
// earlier wrap without the policy (here a record "before-policy", and none of the call left in
// the scoped ledger), a silent wrong answer to "what is fenced?".
func TestLedgerForReadsThePolicy(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	state := t.TempDir()
	child := []string{bin, "demo-server", "--latency", "0s"}
	run := runIn(t, bin, dir, "GORACE=atexit_sleep_ms=0", "XDG_STATE_HOME="+state, store.EnvLedger+"=", envPolicy+"=")
	session := func(name string) string {
		return `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
			`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"record_event","arguments":{"name":"` + name + `"}}}` + "\n"
	}
	wrapped := func(extra []string, flags []string, event string) {
		t.Helper()
		w := run(extra, session(event), append(append(append([]string{"wrap", "--grace", "60s"}, flags...), "--"), child...)...)
		if w.code != exitOK || !strings.Contains(w.stdout, `"id":1`) || !strings.Contains(w.stderr, "admitted=1") {
			t.Fatalf("wrap %v %v: exit %d\nstdout %s\nstderr %s", extra, flags, w.code, w.stdout, w.stderr)
		}
	}
	// The same command, directory and environment, before anyone wrote a policy.
	wrapped(nil, nil, "before-policy")

	scoped := filepath.Join(dir, "scoped.yaml")
	if err := os.WriteFile(scoped, []byte("version: 1\nscope: payments-prod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withLedger := filepath.Join(dir, "ledgered.yaml")
	if err := os.WriteFile(withLedger, []byte("version: 1\nledger: own.db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what  string
		env   []string // the shell's environment, for wrap and for the operator alike
		flags []string // wrap's and ledger's --policy
		event string
	}{
		{"EFFECTFENCE_POLICY with a scope", []string{envPolicy + "=" + scoped}, nil, "scoped-by-env"},
		{"--policy with a scope", nil, []string{"--policy", scoped}, "scoped-by-flag"},
		{"EFFECTFENCE_POLICY with a ledger", []string{envPolicy + "=" + withLedger}, nil, "ledgered-by-env"},
	} {
		wrapped(c.env, c.flags, c.event)
		r := run(c.env, "", append(append(append([]string{"ledger", "ls", "--json"}, c.flags...), "--for", "--"), child...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, c.event) || strings.Contains(r.stdout, "before-policy") {
			t.Errorf("%s: ledger ls --for does not open wrap's ledger (want the record %q, not before-policy's): exit %d\nstdout %s\nstderr %s",
				c.what, c.event, r.code, r.stdout, r.stderr)
		}
	}
	// A policy goes with --for, as --scope does.
	if r := run(nil, "", "ledger", "ls", "--policy", scoped); r.code != exitUsage || !strings.Contains(r.stderr, "goes with --for") {
		t.Errorf("ledger ls --policy without --for: exit %d, stderr %s", r.code, r.stderr)
	}
	// Set in the shell, EFFECTFENCE_POLICY does not stop the other ledgers from opening.
	if r := run([]string{envPolicy + "=" + scoped}, "", "ledger", "ls", "--json", "--ledger", filepath.Join(dir, "own.db")); r.code != exitOK || !strings.Contains(r.stdout, "ledgered-by-env") {
		t.Errorf("ledger ls --ledger with EFFECTFENCE_POLICY set: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// runIn returns a runner of the binary bin in dir, with the environment os.Environ(), then
// env, then each run's extra, and what it was given on stdin: its exit code and output.
func runIn(t *testing.T, bin, dir string, env ...string) func(extra []string, stdin string, args ...string) result {
	return func(extra []string, stdin string, args ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), env...), extra...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		code := 0
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("effectfence %s: %v", strings.Join(args, " "), err)
		}
		return result{code, out.String(), errb.String()}
	}
}
