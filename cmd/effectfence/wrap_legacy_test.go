package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestWrapDoesNotConsultALedgerFromBeforeScopes is docs/identity.md's "Ledgers of wrap from
// before scopes were named after the argv alone; wrap does not consult them (it cannot know
// whether they belonged to this scope) but logs their path at startup when one exists". A
// charge is recorded in the argv-named file (by a wrap pointed at it), then wrap runs with its
// default ledger: the receipt there is not handed out (the charge runs), and the startup log
// names the old file so an operator can inspect it.
func TestWrapDoesNotConsultALedgerFromBeforeScopes(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	state, dir := t.TempDir(), t.TempDir()
	effects := filepath.Join(dir, "effects")
	child := []string{bin, "demo-server", "--latency", "0s", "--effects", effects}
	legacy := filepath.Join(state, "effectfence", store.LegacyWrapName(child)+".db")
	if err := os.MkdirAll(filepath.Dir(legacy), 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"XDG_STATE_HOME=" + state, store.EnvLedger + "="}
	const session = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}` + "\n"
	wrapRun := func(flags ...string) result {
		t.Helper()
		r := runBinary(t, env, session, append(append(append([]string{"wrap", "--grace", "60s"}, flags...), "--"), child...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, `"id":1`) {
			t.Fatalf("wrap %v: exit %d\nstdout %s\nstderr %s", flags, r.code, r.stdout, r.stderr)
		}
		return r
	}
	executions := func() int {
		b, _ := os.ReadFile(effects)
		return strings.Count(string(b), "\n")
	}

	wrapRun("--ledger", legacy) // the same scope, recorded in the argv-named file
	if n := executions(); n != 1 {
		t.Fatalf("%d executions after the first wrap; want 1", n)
	}
	r := wrapRun()
	if n := executions(); n != 2 || strings.Contains(r.stdout, `"effectfence/replayed":true`) {
		t.Fatalf("with the default ledger, %d executions and answer %s; want the charge run (the argv-named file is not consulted)", n, r.stdout)
	}
	if want := "a ledger of this command from before scopes exists at " + legacy; !strings.Contains(r.stderr, want) {
		t.Fatalf("wrap's startup log does not say %q:\n%s", want, r.stderr)
	}
	if again := wrapRun(); executions() != 2 || !strings.Contains(again.stdout, `"effectfence/replayed":true`) {
		t.Fatalf("a duplicate through the default ledger: %s, %d executions; want a replay", again.stdout, executions())
	}
}
