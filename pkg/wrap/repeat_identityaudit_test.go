package wrap_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// TestIgnoringTheRepeatArgumentIsRefused: docs/identity.md says effectfence_repeat "is part of
// the identity", and every replay note tells the agent to set it for a deliberate new action.
// An ignored field is cut before the identity is taken, so a configuration that ignores it (or
// a part of it) made the repeat the note asks for one more duplicate: it was answered with the
// first call's receipt and did not run. Such a configuration is refused at start, whichever
// way it is given (a flag, a policy tool entry, the policy's defaults), with a usage error
// (exit 2) that names the argument, and no ledger is created: the real wrap binary, each way.
func TestIgnoringTheRepeatArgumentIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policyFile := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, flags := range map[string][]string{
		"flag":            {"--ignore-field", "charge:effectfence_repeat"},
		"flag, a part":    {"--ignore-field", "charge:effectfence_repeat.n"},
		"policy tool":     {"--policy", policyFile("tool.yaml", "version: 1\ntools:\n  charge:\n    ignore: [effectfence_repeat]\n")},
		"policy defaults": {"--policy", policyFile("defaults.yaml", "version: 1\ndefaults:\n  ignore: [effectfence_repeat]\n")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			argv := append(append(append([]string{"wrap"}, flags...), "--"), r.childCmd()...)
			cmd := exec.Command(efBin, argv...)
			cmd.Env = append(os.Environ(), r.env()...)
			cmd.Stdin = strings.NewReader("") // an agent that hangs up at once: a wrap that starts exits 0
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code == 2 && strings.Contains(stderr.String(), "effectfence_repeat") {
				if _, err := os.Stat(r.ledger); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the refused configuration created the ledger %s (%v)", r.ledger, err)
				}
				return
			}
			// Taken: what it does to the repeat the replay note asks for.
			w := r.wrap(flags...)
			first := call(t, w.Session, "charge", `{"amount":5,"effectfence_repeat":{"n":1}}`)
			again := call(t, w.Session, "charge", `{"amount":5,"effectfence_repeat":{"n":1}}`)
			repeat := call(t, w.Session, "charge", `{"amount":5,"effectfence_repeat":{"n":2}}`)
			t.Errorf("wrap %s: exit %d, stderr %q; want a usage error (exit 2) naming effectfence_repeat. Taken, it fenced charge {amount:5} with effectfence_repeat {n:1} (replayed %v), its duplicate (replayed %v, note asks for effectfence_repeat: %v), then the repeat with effectfence_repeat {n:2}: replayed %v, %d executions in all (want 2: the repeat is a new action)",
				strings.Join(flags, " "), code, stderr.String(), first.replayed(), again.replayed(), strings.Contains(again.note(), "effectfence_repeat"), repeat.replayed(), r.effectCount())
		})
	}
}

// The library refuses it too: wrap.New with Options.Ignore naming the repeat argument.
func TestNewRefusesAnIgnoredRepeatArgument(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	led := r.openLedger()
	for _, p := range []wrap.Path{{wrap.RepeatArg}, {wrap.RepeatArg, "n"}} {
		_, err := wrap.New(wrap.Options{Command: r.childCmd(), Env: r.env(), Engine: led.Engine, Log: &logBuf{},
			Ignore: map[string][]wrap.Path{"charge": {p}}})
		if err == nil || !strings.Contains(err.Error(), wrap.RepeatArg) {
			t.Errorf("wrap.New with charge's %q ignored: %v; want it refused, naming %s", p.String(), err, wrap.RepeatArg)
		}
	}
}
