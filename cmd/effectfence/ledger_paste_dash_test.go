package main

import (
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

// An intent is the agent's text, and may begin with '-' ("-x", "--force"). The commands
// `ledger show` suggests for it must still paste: placed where the command reads its flags,
// such an intent was read as a flag, and every suggested resolve failed as usage (exit 2)
// with nothing resolved. Pasted into a real shell, each resolves exactly that intent.
func TestShowSuggestionsPasteForAnIntentThatLooksLikeAFlag(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	answers := map[string]string{"-x": "--did-not-happen", "--force": "--happened", "--ledger=elsewhere.db": "--did-not-happen"}
	for intent := range answers {
		fenceIntents(t, path, intent)
	}
	bin := effectfence(t)
	dir := t.TempDir()
	env := append(os.Environ(), "NO_COLOR=1", store.EnvLedger+"=", "XDG_STATE_HOME="+filepath.Join(dir, "state"))
	for intent, flag := range answers {
		r := runBinary(t, []string{store.EnvLedger + "="}, "", "ledger", "show", "--ledger", path, "--", intent)
		var line string
		for l := range strings.SplitSeq(r.stdout, "\n") {
			if strings.Contains(l, "ledger resolve ") && strings.Contains(l, flag+" ") {
				line, _, _ = strings.Cut(strings.TrimSpace(l), "  #")
			}
		}
		cmdline, ok := strings.CutPrefix(line, "effectfence ")
		if !ok {
			t.Fatalf("ledger show %q suggests no `effectfence ledger resolve … %s`: exit %d\n%s%s", intent, flag, r.code, r.stdout, r.stderr)
		}
		paste := exec.Command(sh, "-c", shellQuote(bin)+" "+cmdline)
		paste.Dir, paste.Env = dir, env
		if out, err := paste.CombinedOutput(); err != nil {
			t.Errorf("pasted, %q: %v\n%s", line, err, out)
			continue
		}
		r = runBinary(t, []string{store.EnvLedger + "="}, "", "ledger", "show", "--json", "--ledger", path, "--", intent)
		var d ledger.Detail
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("ledger show --json %q: %v\n%s%s", intent, err, r.stdout, r.stderr)
		}
		want := map[string]fence.State{"--did-not-happen": fence.StateNone, "--happened": fence.StateDone}[flag]
		if d.Record.State != want {
			t.Errorf("after pasting %q: %q is %s; want %s", line, intent, d.Record.State, want)
		}
	}
}
