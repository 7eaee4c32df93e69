package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrapUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"wrap"}, "no MCP server command given"},
		{[]string{"wrap", "--"}, "no MCP server command given"},
		{[]string{"wrap", "--key", "charge", "--", "x"}, "want TOOL:path"},
		{[]string{"wrap", "--key", "charge:a,,b", "--", "x"}, "empty segment"},
		{[]string{"wrap", "--key", "c:a", "--key", "c:b", "--", "x"}, "given twice"},
		{[]string{"wrap", "--ignore-field", ":x", "--", "x"}, "want TOOL:json.path"},
		{[]string{"wrap", "--wait", "0s", "--", "x"}, "--wait must be positive"},
		{[]string{"wrap", "--lease-secs", "-1", "--ledger", "memory", "--", "x"}, "--lease-secs=-1: want a number of seconds from 1"},
		{[]string{"wrap", "--lease-secs", "2592001", "--ledger", "memory", "--", "x"}, "--lease-secs=2592001: want a number of seconds from 1"},
		{[]string{"wrap", "--lease-secs", "NaN", "--ledger", "memory", "--", "x"}, "--lease-secs=NaN"},
		{[]string{"wrap", "--result-ttl-secs", "+Inf", "--ledger", "memory", "--", "x"}, "--result-ttl-secs=+Inf"},
		{[]string{"wrap", "--lease-secs", "0.001", "--ledger", "memory", "--", "x"}, "--lease-secs=0.001"},
		{[]string{"wrap", "--max-concurrent", "0", "--", "x"}, "--max-concurrent must be positive"},
		// --init-timeout 0 or below was taken for the default 30s without a word, where every
		// other bound of wrap's refuses it (a bad argument: README's exit 2).
		{[]string{"wrap", "--init-timeout", "0s", "--", "x"}, "--init-timeout must be positive"},
		{[]string{"wrap", "--init-timeout", "-1s", "--", "x"}, "--init-timeout must be positive"},
		{[]string{"wrap", "--init-timeout", "-1s", "--upstream", "http://127.0.0.1:1/mcp"}, "--init-timeout must be positive"},
		{[]string{"wrap", "--replay-window", "soon", "--", "x"}, "want a positive duration"},
		{[]string{"wrap", "--replay-window", "charge=-1m", "--", "x"}, "want a positive duration"},
		{[]string{"wrap", "--replay-window", "500ms", "--", "x"}, "from 1s to 366d"},
		{[]string{"wrap", "--replay-window", "charge=367d", "--", "x"}, "from 1s to 366d"},
		{[]string{"wrap", "--ledger", "redis://localhost:6379", "--", "x"}, "supported forms"},
		{[]string{"wrap", "--ledger", "~/l.db", "--", "x"}, "not expanded"},
		{[]string{"wrap", "--ledger", "Postgres://h/db", "--", "x"}, "lower case"},
	}
	for _, c := range cases {
		var out, errw bytes.Buffer
		code := run(context.Background(), append([]string{"effectfence"}, c.args...), streams{strings.NewReader(""), &out, &errw})
		if code != exitUsage || !strings.Contains(errw.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errw.String(), exitUsage, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: wrote to stdout: %q", c.args, out.String())
		}
	}
}

func TestWrapAgentHangsUpAtOnce(t *testing.T) {
	// No agent input at all: wrap starts nothing, prints its counters and exits cleanly. The
	// child's own flags are never taken for wrap's, with or without "--".
	for _, args := range [][]string{
		{"wrap", "--ledger", "memory", "--", "true", "--wait", "x"},
		{"wrap", "--ledger", "memory", "true", "-y", "--key", "x"},
	} {
		var out, errw bytes.Buffer
		code := run(context.Background(), append([]string{"effectfence"}, args...), streams{strings.NewReader(""), &out, &errw})
		if code != exitOK || out.Len() != 0 || !strings.Contains(errw.String(), "effectfence since boot: admitted=0") ||
			!strings.Contains(errw.String(), "serving true") {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errw.String())
		}
	}
}

// TestWrapOfAMissingCommand runs the real binary as an MCP config with a typo would: it must
// fail (exit 2, one line and a hint), write nothing on the protocol channel, and create no
// ledger file or directory. So must a command that exists but is not executable.
func TestWrapOfAMissingCommand(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	env := []string{"XDG_STATE_HOME=" + state, "EFFECTFENCE_LEDGER="}
	init := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n"
	notExec := filepath.Join(t.TempDir(), "mcp-server.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"/nonexistent/mcp-server", "effectfence-no-such-server", notExec} {
		r := runBinary(t, env, init, "wrap", "--", cmd, "--flag")
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "cannot run the MCP server command") ||
			!strings.Contains(r.stderr, "no ledger was created") {
			t.Errorf("wrap -- %s: exit %d, stdout %q, stderr %q", cmd, r.code, r.stdout, r.stderr)
		}
	}
	entries, err := os.ReadDir(state)
	if err != nil || len(entries) != 0 {
		t.Fatalf("the state directory holds %v (%v); want nothing created", entries, err)
	}
}

// TestWrapPolicyErrorsOneLine: a policy file with several errors, given to wrap or to a
// ledger command's --for, is one line on stderr (the first error, how many there are, and the
// command that lists each) and the hint; the errors were joined by line breaks that reached
// stderr escaped, a literal \n between them.
func TestWrapPolicyErrorsOneLine(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\ntools:\n  a: {fence: maybe}\n  b: {replay_window: 9y}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"wrap", "--policy", bad, "--", "x"}, {"ledger", "ls", "--policy", bad, "--for", "--", "x"}} {
		code, stdout, stderr := runCLI(t, "", args...)
		lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
		if code != exitUsage || stdout != "" || len(lines) != 2 || strings.Contains(stderr, `\n`) ||
			!strings.Contains(lines[0], "fence must be true or false") || !strings.Contains(lines[0], "2 errors in all: `effectfence policy check "+bad+"` lists each") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args[:2], code, stdout, stderr)
		}
	}
}
