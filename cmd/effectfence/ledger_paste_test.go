package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// docs/ledger.md: the commands `ledger show` suggests for a fenced intent whose id holds
// control characters use $'…' quoting, so they paste correctly into bash. Pasted into a real
// bash, started elsewhere, each suggested command resolves exactly that intent of exactly the
// ledger shown: a ledger named by a relative --ledger in a directory whose name needs quoting,
// intents with terminal escapes, a C1 control, a bidi override, a quote and a backslash.
// Before, the suggestion named no ledger, so pasted it reached the default one.
func TestShowSuggestionsPasteIntoBash(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash:", err)
	}
	base := t.TempDir()
	dir := filepath.Join(base, "led ger's $HOME")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ledger.db")
	seedHostile(t, path) // evilIntent: aborted, fenced
	other := "refund:\u202egnp\u009b2J 'it''s' \\x41 $(touch pwned)"
	fenceIntents(t, path, other)

	bin := effectfence(t)
	elsewhere := t.TempDir()
	env := append(os.Environ(), "NO_COLOR=1", store.EnvLedger+"=", "XDG_STATE_HOME="+filepath.Join(elsewhere, "state"), "LC_ALL=C.UTF-8")
	for intent, flag := range map[string]string{evilIntent: "--did-not-happen", other: "--happened"} {
		show := exec.Command(bin, "ledger", "show", intent, "--ledger", filepath.Join(filepath.Base(dir), "ledger.db"))
		show.Dir, show.Env = base, env
		out, err := show.Output()
		if err != nil {
			t.Fatalf("ledger show %q: %v\n%s", intent, err, out)
		}
		var line string
		for l := range strings.SplitSeq(string(out), "\n") {
			if strings.Contains(l, "ledger resolve ") && strings.Contains(l, flag+" ") {
				line = strings.TrimSpace(l)
			}
		}
		cmdline, ok := strings.CutPrefix(line, "effectfence ")
		if !ok {
			t.Fatalf("ledger show %q suggests no `effectfence ledger resolve … %s`:\n%s", intent, flag, out)
		}
		paste := exec.Command(bash, "-c", shellQuote(bin)+" "+cmdline)
		paste.Dir, paste.Env = elsewhere, env
		if out, err := paste.CombinedOutput(); err != nil {
			t.Fatalf("pasted into bash, %q: %v\n%s", line, err, out)
		}
		r := runBinary(t, []string{store.EnvLedger + "="}, "", "ledger", "show", intent, "--json", "--ledger", path)
		var d ledger.Detail
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("ledger show --json %q: %v\n%s%s", intent, err, r.stdout, r.stderr)
		}
		want := map[string]fence.State{"--did-not-happen": fence.StateNone, "--happened": fence.StateDone}[flag]
		resolved := false
		for _, ev := range d.Events {
			resolved = resolved || strings.HasPrefix(ev.Kind, "resolve_")
		}
		if d.Record.State != want || !resolved {
			t.Fatalf("after pasting %q: %q is %s (resolve event: %v); want %s", line, intent, d.Record.State, resolved, want)
		}
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "pwned")); err == nil {
		t.Fatal("a pasted suggestion ran a command substitution from the intent")
	}
}

// fenceIntents claims each intent in the SQLite ledger at path and records it lost: unknown,
// fenced until an operator resolves or clears it.
func fenceIntents(t *testing.T, path string, intents ...string) {
	t.Helper()
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, intent := range intents {
		adm, err := l.Prepare(ctx, fence.Request{Intent: intent, Tool: "t", Args: []byte(`{}`)})
		if err != nil || adm.Ticket == nil {
			t.Fatalf("prepare %q: %+v %v", intent, adm, err)
		}
		if err := l.Lost(ctx, *adm.Ticket, "connection dropped"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
