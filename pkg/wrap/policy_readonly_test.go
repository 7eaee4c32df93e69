package wrap_test

import (
	"strings"
	"testing"
)

// A tool annotated readOnlyHint passes through unfenced unless it is fenced (fence: true,
// --fence, fence_reads), so the settings a policy entry or a per-tool flag gives it (a key, a
// replay window, fields to redact) have no effect. That must not be silent: a reviewer reads
// replay_window: 1d and believes the tool's calls are replayed for a day. Wrap says so in its
// log at the tool's first call, once. Settings from defaults apply to every tool and are not
// named; a fenced tool's settings apply and are not named either; nor is a read-only tool's
// wait, which bounds how long its calls wait for the server's tool listing.
func TestPolicySettingsOfAPassedToolAreLogged(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	path := writePolicy(t, r, `version: 1
defaults:
  replay_window: 1h
tools:
  balance:
    replay_window: 1d
    wait: 20s
    redact: [account]
  charge:
    key: [amount]
`)
	w := r.wrap("--policy", path, "--rerun-safe", "balance")
	if x := call(t, w.Session, "charge", `{"amount":5}`); x.IsError {
		t.Fatalf("charge: %s", x.text())
	}
	for range 2 {
		if x := call(t, w.Session, "balance", `{}`); x.IsError || x.replayed() {
			t.Fatalf("balance (read-only, not fenced) was not passed through: %+v %s", x, x.text())
		}
	}
	const want = `tool "balance" is annotated readOnlyHint and is not fenced, so its calls pass through and its replay_window, --rerun-safe have no effect`
	waitFor(t, "wrap to name the settings that have no effect", func() bool { return strings.Contains(w.log.String(), want) })
	log := w.log.String()
	if strings.Count(log, "annotated readOnlyHint and is not fenced") != 1 {
		t.Fatalf("want one line, naming balance only:\n%s", log)
	}
}

// The same without a policy file: per-tool flags alone (wrap's own settings, not a policy's
// resolved ones) are named as well.
func TestFlagSettingsOfAPassedToolAreLogged(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--redact", "balance:account", "--replay-window", "balance=1d")
	for range 2 {
		if x := call(t, w.Session, "balance", `{"account":"a"}`); x.IsError || x.replayed() {
			t.Fatalf("balance (read-only, not fenced) was not passed through: %+v %s", x, x.text())
		}
	}
	const want = `tool "balance" is annotated readOnlyHint and is not fenced, so its calls pass through and its --replay-window have no effect`
	waitFor(t, "wrap to name the flags that have no effect", func() bool { return strings.Contains(w.log.String(), want) })
	if log := w.log.String(); strings.Count(log, "annotated readOnlyHint and is not fenced") != 1 {
		t.Fatalf("want one line:\n%s", log)
	}
}
