package wrap_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// docs/identity.md: text that is not valid UTF-8 goes into the scope byte for byte. Two real
// wraps on one ledger file whose configurations differ only in one byte that is not UTF-8 (a
// Latin-1 "café" against "cafè", in an environment value and in the working directory's
// path) are two servers: the identical call runs on each. Before 2026-12-01 each such byte was
// hashed as U+FFFD, so the second was answered with the first one's receipt and did not run.
// The same configuration again is the same scope: its duplicate is replayed.
func TestScopeTellsApartBytesThatAreNotUTF8(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	run := func(what string, want bool) {
		t.Helper()
		before := len(mcptest.Effects(r.effects))
		w := r.wrap()
		x := call(t, w.Session, "charge", `{"amount":7}`)
		w.Close()
		if ran := len(mcptest.Effects(r.effects)) > before; x.IsError || ran != want || x.replayed() == want {
			t.Fatalf("%s: %q (replayed %v, ran %v); want ran %v\n%s", what, x.text(), x.replayed(), ran, want, w.log.String())
		}
	}
	r.extraEnv = []string{"ACCOUNT=caf\xe9"}
	run("ACCOUNT=caf\\xe9", true)
	r.extraEnv = []string{"ACCOUNT=caf\xe8"}
	run("ACCOUNT=caf\\xe8", true)
	run("ACCOUNT=caf\\xe8 again", false)

	r.extraEnv = nil
	for _, name := range []string{"caf\xe9", "caf\xe8"} {
		r.workDir = filepath.Join(r.dir, name)
		if err := os.Mkdir(r.workDir, 0o700); err != nil {
			t.Fatal(err)
		}
		run("directory "+filepath.Base(r.workDir), true)
	}
	run("the directory caf\\xe8 again", false)
}
