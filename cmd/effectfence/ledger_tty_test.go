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
)

// onTerminal runs the real binary with args on a pseudo-terminal (util-linux script) and
// returns what it wrote there.
func onTerminal(t *testing.T, env []string, args ...string) string {
	t.Helper()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script(1) to give the binary a terminal")
	}
	quoted := []string{posixQuote(effectfence(t))}
	for _, a := range args {
		quoted = append(quoted, posixQuote(a))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "-qec", strings.Join(quoted, " "), "/dev/null")
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("script %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

func posixQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestLedgerColourOnlyOnATerminal: the ledger views are plain text in a pipe whether or not
// NO_COLOR is set (a script reading `ledger ls` gets no escapes and whole intent ids); on a
// terminal states are coloured and long cells shortened, never with NO_COLOR, and not
// shortened with --wide (docs/ledger.md).
func TestLedgerColourOnlyOnATerminal(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedHostile(t, path)
	noPref := []string{"NO_COLOR="} // empty: no preference (no-color.org)
	for _, args := range [][]string{
		{"ledger", "ls", "--ledger", path},
		{"ledger", "show", longIntent, "--ledger", path},
		{"ledger", "verify", "--ledger", path},
		{"ledger", "check", "--ledger", path},
	} {
		r := runBinary(t, noPref, "", args...)
		if r.code != exitOK || strings.Contains(r.stdout, "\x1b") || strings.Contains(r.stderr, "\x1b") {
			t.Errorf("%v in a pipe without NO_COLOR: exit %d, escapes in the output:\n%q\n%q", args[1], r.code, r.stdout, r.stderr)
		}
		if args[1] == "ls" && !strings.Contains(r.stdout, longIntent) {
			t.Errorf("ledger ls in a pipe does not show the whole id %s:\n%s", longIntent, r.stdout)
		}
	}
	out := onTerminal(t, noPref, "ledger", "ls", "--ledger", path)
	if !strings.Contains(out, "\x1b[32mdone\x1b[0m") || strings.Contains(out, longIntent) || !strings.Contains(out, "…") {
		t.Errorf("ledger ls on a terminal: want coloured states and shortened cells:\n%q", out)
	}
	out = onTerminal(t, noPref, "ledger", "ls", "--wide", "--ledger", path)
	if !strings.Contains(out, longIntent) {
		t.Errorf("ledger ls --wide on a terminal does not show the whole id:\n%q", out)
	}
	for _, args := range [][]string{
		{"ledger", "ls", "--ledger", path},
		{"ledger", "verify", "--ledger", path},
		{"ledger", "check", "--ledger", path},
	} {
		if out := onTerminal(t, []string{"NO_COLOR=1"}, args...); strings.Contains(out, "\x1b[3") || strings.Contains(out, "\x1b[1") {
			t.Errorf("%v on a terminal with NO_COLOR: colour escapes:\n%q", args[1], out)
		}
	}
}
