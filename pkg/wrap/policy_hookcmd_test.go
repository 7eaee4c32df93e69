package wrap_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The on_unknown hook is the alert of last resort: a program it cannot run was found only
// when a call's outcome became unknown, and a relative program path (a script committed
// beside the policy) was looked up from wherever wrap happened to start. A program written
// with a path is taken from the policy file's directory, as the ledger is, and one that
// cannot be run stops wrap at its start.
func TestPolicyHookProgramIsFoundAtStart(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if err := os.WriteFile(filepath.Join(r.dir, "missing.yaml"), []byte("version: 1\non_unknown:\n  command: [notify-oncal1, --team, payments]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.tryWrap("--policy", filepath.Join(r.dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), `on_unknown: cannot run "notify-oncal1"`) {
		t.Fatalf("wrap with a hook program that does not exist: %v; want it refused at start", err)
	}
	if _, err := os.Stat(r.effects); err == nil {
		t.Fatal("the server was started")
	}

	// A script beside the policy, wrap started elsewhere: the hook runs it.
	events := filepath.Join(r.dir, "events.jsonl")
	if err := os.MkdirAll(filepath.Join(r.dir, "hooks"), 0o700); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\ncat >> " + events + "\necho >> " + events + "\n"
	if err := os.WriteFile(filepath.Join(r.dir, "hooks", "notify.sh"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	path := writePolicy(t, r, "version: 1\non_unknown:\n  command: [./hooks/notify.sh]\n  retries: 0\ntools:\n  die:\n    elicit: false\n")
	r.workDir = t.TempDir()
	w, err := r.tryWrap("--policy", path)
	if err != nil {
		t.Fatalf("wrap with a hook script beside the policy, started elsewhere: %v", err)
	}
	if x := call(t, w.Session, "die", `{"tag":"hooked"}`); !x.IsError {
		t.Fatalf("a call inside a dying server: %s", x.text())
	}
	waitFor(t, "the hook script beside the policy to write the event", func() bool {
		b, _ := os.ReadFile(events)
		return strings.Contains(string(b), "effectfence ledger resolve")
	})
}
