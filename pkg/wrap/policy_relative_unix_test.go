//go:build unix

package wrap_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// docs/policy.md: a relative ledger path in a policy is taken from the policy file's
// directory. Named from that very directory (`--policy policy.yaml`, the usual MCP config),
// the directory is ".", and filepath.Join cleaned the "./" that keeps a path a path away:
// `ledger: ./memory`, a SQLite file named memory, became "memory", a ledger in wrap's memory,
// so a charge ran again after wrap was killed and restarted; `ledger: ./a:b.db` (the form
// docs/ledger.md gives a file name with a colon) became "a:b.db", which wrap refused as a URL
// scheme after `policy check` had passed the file. Each ledger here must be that file beside
// the policy, and survive a kill -9 of the wrap that wrote it.
func TestPolicyLedgerBesideAPolicyNamedFromItsDirectory(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"memory", "a:b.db"} {
		r := newRig(t)
		r.ledger = "" // EFFECTFENCE_LEDGER empty: the policy names the ledger
		r.workDir = r.dir
		writePolicy(t, r, "version: 1\nledger: ./"+name+"\n")
		file := filepath.Join(r.dir, name)
		w, err := r.tryWrap("--policy", "policy.yaml")
		if err != nil {
			t.Fatalf("ledger ./%s: wrap refused the policy `policy check` accepts: %v", name, err)
		}
		if x := call(t, w.Session, "charge", `{"amount":11}`); x.IsError || x.replayed() {
			t.Fatalf("ledger ./%s: the first charge: %q (isError %v, replayed %v)", name, x.text(), x.IsError, x.replayed())
		}
		if err := syscall.Kill(w.Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-w.Done()

		w2 := r.wrap("--policy", "policy.yaml")
		if x := call(t, w2.Session, "charge", `{"amount":11}`); !x.replayed() {
			t.Fatalf("ledger ./%s: after kill -9 and a restart the charge ran again (%q)\nlog: %s", name, x.text(), w2.log.String())
		}
		if n := r.effectCount(); n != 1 {
			t.Fatalf("ledger ./%s: %d charges, want 1", name, n)
		}
		if _, err := os.Stat(file); err != nil || !strings.Contains(w.log.String(), "ledger "+file+";") {
			t.Fatalf("ledger ./%s: wrap does not use the file %s beside the policy (%v):\n%s", name, file, err, w.log.String())
		}
	}
}

// docs/policy.md: an on_unknown program written with a relative path (./hooks/notify) is
// taken from the policy file's directory; a bare name is looked up in PATH. With the policy
// named from its own directory, `command: [./notify.sh]` lost its "./" (filepath.Join cleans
// it) and became the bare name notify.sh: wrap ran whatever PATH held under that name (here a
// decoy), and without one refused to start although the script was beside the policy.
func TestPolicyHookScriptBesideAPolicyNamedFromItsDirectory(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.workDir = r.dir
	events, decoyEvents := filepath.Join(r.dir, "events.jsonl"), filepath.Join(r.dir, "decoy.jsonl")
	decoy := t.TempDir()
	for file, out := range map[string]string{filepath.Join(r.dir, "notify.sh"): events, filepath.Join(decoy, "notify.sh"): decoyEvents} {
		if err := os.WriteFile(file, []byte("#!/bin/sh\ncat >> "+out+"\necho >> "+out+"\n"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	r.extraEnv = []string{"PATH=" + decoy + string(os.PathListSeparator) + os.Getenv("PATH")}
	writePolicy(t, r, "version: 1\non_unknown:\n  command: [./notify.sh]\n  retries: 0\ntools:\n  die:\n    elicit: false\n")
	w := r.wrap("--policy", "policy.yaml")
	if x := call(t, w.Session, "die", `{"tag":"hooked"}`); !x.IsError {
		t.Fatalf("a call inside a dying server: %s", x.text())
	}
	read := func(file string) string { b, _ := os.ReadFile(file); return string(b) }
	waitFor(t, "a hook program to be given the event", func() bool {
		return strings.Contains(read(events)+read(decoyEvents), "effectfence ledger resolve")
	})
	if got := read(decoyEvents); got != "" {
		t.Fatalf("the hook ran notify.sh from PATH, not the script beside the policy; it was given:\n%s", got)
	}
}
