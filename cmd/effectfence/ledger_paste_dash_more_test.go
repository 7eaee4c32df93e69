package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// TestRefusalCommandsPasteForAnIntentThatLooksLikeAFlag: the clear command a refusal of a
// fenced intent names (fence.PriorFailureError, which serve passes on; wrap's advice, with
// the --ledger hint it is given) must clear that intent when an operator pastes it, with a
// reason, into a real shell, also when the agent's intent begins with '-' (before
// 2026-12-06 such an intent stood where the command reads flags: every paste failed as usage,
// exit 2, nothing cleared) or holds characters a shell acts on.
func TestRefusalCommandsPasteForAnIntentThatLooksLikeAFlag(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	bin := effectfence(t)
	env := append(os.Environ(), "NO_COLOR=1", store.EnvLedger+"="+path, "XDG_STATE_HOME="+filepath.Join(dir, "state"))
	for _, intent := range []string{"-x", "--force", "--ledger=elsewhere.db", "-charge:$5 a", "plain:1"} {
		for _, from := range []string{"fence", "wrap"} {
			fenceIntents(t, path, intent)
			l, err := store.Open(ctx, store.Options{Ledger: path})
			if err != nil {
				t.Fatal(err)
			}
			req := fence.Request{Intent: intent, Tool: "t", Args: []byte(`{}`)}
			_, err = l.Prepare(ctx, req)
			var pf fence.PriorFailureError
			if !errors.As(err, &pf) {
				t.Fatalf("%q: %v; want it fenced", intent, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			var cmdline string
			switch from {
			case "fence":
				msg := pf.Error()
				i, j := strings.Index(msg, "`"), strings.LastIndex(msg, "`")
				cmdline = strings.Replace(msg[i+1:j], "--reason ...", "--reason checked", 1)
			case "wrap":
				advice := wrap.ClearCommandFor(intent, clearHint(path))
				_, cmdline, _ = strings.Cut(advice, "if it did not: ")
				cmdline = strings.Replace(cmdline, "'checked: <what you verified>'", "checked", 1)
			}
			line, ok := strings.CutPrefix(cmdline, "effectfence ")
			if !ok {
				t.Fatalf("%s, %q: no effectfence command: %q", from, intent, cmdline)
			}
			paste := exec.Command(sh, "-c", shellQuote(bin)+" "+line)
			paste.Dir, paste.Env = dir, env
			if out, err := paste.CombinedOutput(); err != nil {
				t.Fatalf("%s, %q: pasted %q: %v\n%s", from, intent, cmdline, err, out)
			}
			l, err = store.Open(ctx, store.Options{Ledger: path})
			if err != nil {
				t.Fatal(err)
			}
			adm, err := l.Prepare(ctx, req)
			if err != nil || adm.Ticket == nil {
				t.Errorf("%s, %q: after pasting %q the intent is not free: %v", from, intent, cmdline, err)
			} else if err := l.Release(ctx, *adm.Ticket, "test"); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
