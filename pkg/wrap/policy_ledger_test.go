package wrap_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/policy.md: the policy's scope and ledger are the fleet's sharing settings ("wraps
// with the same scope share receipts across directories and environments"; a relative
// ledger path is taken from the policy file's directory), and EFFECTFENCE_LEDGER wins over
// the file's ledger. Two wraps started from different directories, with another environment
// each, read one policy: the call runs once and the second wrap replays it from the ledger
// beside the policy. With EFFECTFENCE_LEDGER set, the same call goes to that ledger instead.
func TestPolicyScopeAndLedgerAreShared(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.ledger = "" // EFFECTFENCE_LEDGER empty: the policy names the ledger
	path := writePolicy(t, r, "version: 1\nscope: payments-prod\nledger: shared/ledger.db\n")
	if err := os.Mkdir(filepath.Join(r.dir, "shared"), 0o700); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(r.dir, "shared", "ledger.db")
	for i, env := range []string{"REPLICA=a", "REPLICA=b"} {
		r.workDir = t.TempDir()
		r.extraEnv = []string{env}
		w := r.wrap("--policy", path)
		x := call(t, w.Session, "charge", `{"amount":11}`)
		if i == 1 && !x.replayed() {
			t.Fatalf("the second wrap (another directory and environment, the policy's scope) ran the call again: %+v\nlog: %s", x, w.log.String())
		}
		if !strings.Contains(w.log.String(), "ledger "+shared) || !strings.Contains(w.log.String(), `scope "payments-prod"`) {
			t.Fatalf("wrap %d does not use the policy's ledger and scope:\n%s", i, w.log.String())
		}
		w.Close()
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
	// EFFECTFENCE_LEDGER over ledger: another ledger, where the call has not run.
	other := filepath.Join(t.TempDir(), "other.db")
	r.ledger = other
	w := r.wrap("--policy", path)
	if x := call(t, w.Session, "charge", `{"amount":11}`); x.replayed() || x.IsError {
		t.Fatalf("with EFFECTFENCE_LEDGER=%s the call must run on that ledger: %+v", other, x)
	}
	if !strings.Contains(w.log.String(), "ledger "+other) {
		t.Fatalf("EFFECTFENCE_LEDGER did not win over the policy's ledger:\n%s", w.log.String())
	}
	w.Close()
	if n := r.effectCount(); n != 2 {
		t.Fatalf("%d charges, want 2", n)
	}
}
