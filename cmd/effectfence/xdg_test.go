package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelativeStateHomeIsIgnored: an XDG_STATE_HOME that is not absolute (a literal "~/state"
// from an MCP config's env, which no shell expands) is ignored, as the XDG specification says.
// serve started in two working directories with it uses one ledger under the home directory,
// and creates nothing under either working directory; before, each directory got a ledger of
// its own (and a directory named "~"), so the second serve knew nothing of the first's
// receipts.
func TestRelativeStateHomeIsIgnored(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	home := t.TempDir()
	want := filepath.Join(home, ".local", "state", "effectfence", "server.db")
	for _, rel := range []string{"~/state", "state"} {
		for _, wd := range []string{t.TempDir(), t.TempDir()} {
			cmd := exec.Command(bin, "serve")
			cmd.Dir = wd
			cmd.Env = append(os.Environ(), "HOME="+home, "XDG_STATE_HOME="+rel, "EFFECTFENCE_LEDGER=")
			cmd.Stdin = strings.NewReader("") // serve ends at the end of its input
			var errb strings.Builder
			cmd.Stderr = &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("serve with XDG_STATE_HOME=%s in %s: %v\n%s", rel, wd, err, errb.String())
			}
			if !strings.Contains(errb.String(), "ledger "+want+" ") {
				t.Fatalf("serve with XDG_STATE_HOME=%s in %s did not use %s:\n%s", rel, wd, want, errb.String())
			}
			if left, _ := os.ReadDir(wd); len(left) != 0 {
				t.Fatalf("serve with XDG_STATE_HOME=%s created %v in its working directory %s", rel, left[0].Name(), wd)
			}
		}
	}
	if _, err := os.Stat(want); err != nil {
		t.Fatalf("no ledger at %s: %v", want, err)
	}

	// A ledger an earlier effectfence made under the working directory is named at start.
	wd := t.TempDir()
	was := filepath.Join(wd, "~", "state", "effectfence", "server.db")
	if err := os.MkdirAll(filepath.Dir(was), 0o700); err != nil {
		t.Fatal(err)
	}
	serve := exec.Command(bin, "serve", "--ledger", was) // a real ledger there
	serve.Stdin = strings.NewReader("")
	if out, err := serve.CombinedOutput(); err != nil {
		t.Fatalf("making the earlier ledger: %v\n%s", err, out)
	}
	serve = exec.Command(bin, "serve")
	serve.Dir = wd
	serve.Env = append(os.Environ(), "HOME="+home, "XDG_STATE_HOME=~/state", "EFFECTFENCE_LEDGER=")
	serve.Stdin = strings.NewReader("")
	out, err := serve.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "an earlier effectfence used "+was) {
		t.Fatalf("serve beside an earlier ledger under its working directory did not name it: %v\n%s", err, out)
	}
}
