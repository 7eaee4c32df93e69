package wrap_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/ledgerturn"
	"github.com/effectfence/effectfence/pkg/fence"
)

// needUnshare skips unless this process can create what (a namespace) with unshare: /proc,
// root and the command.
func needUnshare(t *testing.T, what string) string {
	t.Helper()
	needProc(t)
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to create " + what + " with unshare")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("skipped: the unshare command is not installed")
	}
	return unshare
}

// TestLostLeaseStillAnswersTheCall holds docs/DECISIONS-wrap.md's "a lost lease is logged and
// the result is still returned to the caller" with the one adversary that takes a live
// holder's claim: a wrap in a PID namespace of its own (a container), which the wrap in a
// sibling namespace (another container) cannot judge, stopped (SIGSTOP) past its lease while
// its re-run-safe call runs. The other wrap takes the claim over and runs the call again, as
// re-run safe allows (this test's namespace, the parent of both, sees the holder alive). The stopped wrap,
// resumed, reads its child's answer, finds its claim gone when it records it, logs that, and
// still gives its agent the result: the effect ran, and saying otherwise would invite a third
// run.
func TestLostLeaseStillAnswersTheCall(t *testing.T) {
	unshare := needUnshare(t, "a PID namespace")
	r := newRig(t)
	r.prefix = []string{unshare, "--pid", "--fork", "--mount-proc", "--"}
	w := r.wrap("--rerun-safe", "slow", "--lease-secs", "1")
	// The first call's child waits for gate, made once its wrap is stopped: under load (CI,
	// 2026-12-06) a call of 1.5 s alone ended, and its wrap committed it, before the stop.
	gate := filepath.Join(r.dir, "gate")
	args := fmt.Sprintf(`{"ms":1500,"tag":"lost-lease","until":%q}`, gate)
	first := callInBackground(w.Session, "slow", args)
	led := r.openLedger()
	claim := waitForClaim(t, led)
	if l := fence.OwnerLiveness(claim.Owner); l != fence.Alive {
		t.Fatalf("the holder in its PID namespace (%s) is judged %s from its parent's, want alive", claim.Owner, l)
	}
	kids := childPids(w.Pid()) // unshare --fork: its one child is the wrap
	if len(kids) != 1 {
		t.Fatalf("unshare (pid %d) has children %v, want the wrap alone", w.Pid(), kids)
	}
	holder := kids[0]
	if _, err := ledgerturn.StopOutsideTurn(holder, r.ledger); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(holder, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	w2 := r.wrap("--rerun-safe", "slow", "--lease-secs", "1") // in a sibling namespace (r.prefix)
	if x := call(t, w2.Session, "slow", args); x.IsError || x.replayed() {
		t.Fatalf("the call beside a stopped holder out of sight, once its lease lapsed: %s (replayed %v); want it taken over and run", x.text(), x.replayed())
	}
	taken, err := led.Status(context.Background(), claim.Intent)
	if err != nil || taken.State != fence.StateDone || taken.Token == claim.Token {
		t.Fatalf("after the takeover: %+v %v; want done by another claim than %d", taken, err, claim.Token)
	}

	resume()
	var g called
	select {
	case g = <-first:
	case <-time.After(60 * time.Second):
		t.Fatalf("the resumed holder never answered its agent\nwrap log:\n%s", w.log.String())
	}
	if g.err != nil || g.x.IsError || !strings.Contains(g.x.text(), "slow done") {
		t.Fatalf("the resumed holder answered %q (error %v, isError %v); want the child's result\nwrap log:\n%s", g.x.text(), g.err, g.x.IsError, w.log.String())
	}
	// Its stderr reaches w.log through a pipe, maybe after the answer.
	waitFor(t, "the resumed holder to log its lost lease", func() bool {
		return strings.Contains(w.log.String(), claim.Intent+": recording the result: lease_lost")
	})
	if n := r.effectCount(); n != 2 {
		t.Fatalf("the child ran %d times, want 2 (the holder's and the takeover's)", n)
	}
	after, err := led.Status(context.Background(), claim.Intent)
	if err != nil || after.Token != taken.Token || after.State != fence.StateDone {
		t.Fatalf("the lost holder's commit changed the record: %+v %v; want the takeover's, token %d", after, err, taken.Token)
	}
}
