package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerForWithAnotherEnvironmentNamesTheLedgersThere: wrap's default ledger follows its
// scope, which hashes the environment it was started with, and an MCP client starts it with
// its own (here one variable more than the operator's shell has). `ledger ls --for` from the
// shell then derives another file. Before, it said only "nothing has used it yet": an
// operator looking for a call left unknown was told there was none. It now says why, and
// names the wrap ledgers that are there, among them the one wrap used.
func TestLedgerForWithAnotherEnvironmentNamesTheLedgersThere(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	state := t.TempDir()
	child := []string{bin, "demo-server", "--latency", "0s"}
	run := runIn(t, bin, dir, "GORACE=atexit_sleep_ms=0", "XDG_STATE_HOME="+state, store.EnvLedger+"=", envPolicy+"=")
	session := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"record_event","arguments":{"name":"e"}}}` + "\n"
	client := []string{"MCP_CLIENT_ONLY_VARIABLE=1"} // the client's environment is not the shell's
	w := run(client, session, append([]string{"wrap", "--grace", "60s", "--"}, child...)...)
	m := regexp.MustCompile(`effectfence wrap: ledger (\S+);`).FindStringSubmatch(w.stderr)
	if w.code != exitOK || m == nil {
		t.Fatalf("wrap: exit %d, no ledger named\nstderr %s", w.code, w.stderr)
	}
	used := m[1]
	// From the client's environment, --for finds it.
	if r := run(client, "", append([]string{"ledger", "ls", "--json", "--for", "--"}, child...)...); r.code != exitOK || !strings.Contains(r.stdout, "record_event") {
		t.Fatalf("ledger ls --for with wrap's environment: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	// From the shell's, it derives another file, and says where wrap's ledgers are.
	r := run(nil, "", append([]string{"ledger", "ls", "--json", "--for", "--"}, child...)...)
	if r.code == exitOK {
		t.Fatalf("ledger ls --for with another environment found a ledger: %s", r.stdout)
	}
	for _, want := range []string{"environment", "effectfence wrap: ledger PATH", used} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("ledger ls --for with another environment does not say %q:\n%s", want, r.stderr)
		}
	}
}

// TestOtherWrapLedgersInADirectoryWithGlobCharacters: the state directory is a path the
// operator chose (XDG_STATE_HOME), and may hold '[' or '*'; the listing matched its files with
// filepath.Glob of the directory joined to the pattern, which read those as a pattern, and
// said "no other wrap ledger is in" a directory that held wrap's.
func TestOtherWrapLedgersInADirectoryWithGlobCharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state [old]", "effectfence")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(dir, "wrap-0123456789abcdef.db")
	if err := os.WriteFile(ledger, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := otherWrapLedgers(dir, filepath.Join(dir, "wrap-fedcba9876543210.db"), wrapLedgerWhy); !strings.Contains(got, "wrap-0123456789abcdef.db") || strings.Contains(got, "no other wrap ledger") {
		t.Fatalf("otherWrapLedgers does not name %s:\n%s", ledger, got)
	}
}

// TestLedgerForWithAScopeSaysTheScopeNamesTheFile: with --scope (or a policy's scope) wrap's
// default ledger follows the scope's name alone, so --for finding none says so; it said the
// file followed the command, the directory and the environment, and that an MCP client's
// environment was the likely cause, none of which has a part in a named scope's file.
func TestLedgerForWithAScopeSaysTheScopeNamesTheFile(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv(store.EnvLedger, "")
	t.Setenv(envPolicy, "")
	code, _, errOut := runCLI(t, "", "ledger", "ls", "--for", "--scope", "team-a", "--", "some-mcp-server")
	if code == exitOK {
		t.Fatalf("ledger ls --for --scope found a ledger where none is:\n%s", errOut)
	}
	if strings.Contains(errOut, "environment") || !strings.Contains(errOut, `"team-a"`) {
		t.Fatalf("ledger ls --for --scope with no ledger does not say the scope names the file:\n%s", errOut)
	}
}
