package wrap_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/internal/diskfull"
)

// TestLedgerOnAFileSystemTurnedReadOnly: the ext4 file system under a real wrap's SQLite ledger
// finds an error on its disk and remounts itself read-only (errors=remount-ro; the kernel's
// trigger_fs_error) while a call runs in the server. Every write fails with EROFS from then on,
// until the disk is repaired (unmounted, e2fsck, mounted again). A new call is refused, not
// run, and the agent is told the file system is read-only (before 2026-12-07: "disk I/O error
// (778)"); a duplicate of a recorded call replays it; the running call's answer waits, its
// outcome in neither the ledger nor the spool, and wrap stopped says it will be fenced, not
// the result. `ledger ls` refuses, naming the read-only file system and never advising
// another file (before: "not writable by this user ... choose another file with --ledger",
// a new, empty ledger under which every recorded call would run again); `ledger check` reads
// it and tells the claim in flight. Once the disk is repaired, a new wrap runs the refused
// call once, replays the recorded one, and refuses the one whose outcome was lost: nothing
// runs twice.
func TestLedgerOnAFileSystemTurnedReadOnly(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	disk := diskfull.MountExt4(t)
	r.ledger = filepath.Join(disk.Dir, "ledger.db")
	w := r.wrap("--lease-secs", "2")
	first := call(t, w.Session, "charge", `{"amount":1,"order":"before"}`)
	if first.IsError || r.effectCount() != 1 {
		t.Fatalf("the first call: %s, %d effects", first.text(), r.effectCount())
	}
	type answer struct {
		x   result
		err error
	}
	got := make(chan answer, 1)
	slow := `{"ms":1000,"tag":"read-only"}`
	go func() {
		x, err := callE(w.Session, "slow", slow)
		got <- answer{x, err}
	}()
	waitFor(t, "the slow call to start", func() bool { return strings.Contains(w.log.String(), "slow tag=read-only started") })
	disk.Fail()

	x := call(t, w.Session, "charge", `{"amount":1,"order":"during"}`)
	if !x.IsError || !strings.Contains(x.text(), "NOT executed") || !strings.Contains(x.text(), "read-only") {
		t.Errorf("a call on the read-only ledger: %s (isError %v); want it refused, not executed, the cause named", x.text(), x.IsError)
	}
	if again := call(t, w.Session, "charge", `{"amount":1,"order":"before"}`); !again.replayed() || again.same() != first.same() {
		t.Errorf("a duplicate of the recorded call: replayed %v, %s; want the recorded result", again.replayed(), again.text())
	}
	ls := ledgerCmd(t, r, "ls")
	if ls.err == nil || !strings.Contains(ls.out, "read-only file system") || strings.Contains(ls.out, "--ledger or EFFECTFENCE_LEDGER") || !strings.Contains(ls.out, "not another file") {
		t.Errorf("ledger ls on the read-only file system: %v\n%s\nwant a refusal naming it, never advising another file", ls.err, ls.out)
	}
	// Its lease is 2 s: check judges the claim as the next open will (fence.Outlived), so on a
	// loaded machine, once the lease lapsed, it counts it unknown and says why.
	if check := ledgerCmd(t, r, "check"); check.err != nil || !strings.Contains(check.out, "in_flight=1") &&
		!(strings.Contains(check.out, "unknown=1") && strings.Contains(check.out, "lease lapsed")) {
		t.Errorf("ledger check on the read-only file system: %v\n%s\nwant it read, the slow call's claim in flight (or its lapsed lease said)", check.err, check.out)
	}

	waitFor(t, "the slow call's answer to wait for a ledger or spool", func() bool {
		return strings.Contains(w.log.String(), "the call's answer waits until one of them takes it")
	})
	select {
	case a := <-got:
		t.Fatalf("the slow call was answered while its outcome could not be recorded: %s, %v", a.x.text(), a.err)
	default:
	}
	if err := syscall.Kill(w.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	if a := <-got; a.err != nil || !a.x.IsError || !strings.Contains(a.x.text(), "NOT be executed again") || strings.Contains(a.x.text(), "slow done") {
		t.Errorf("the slow call once wrap stopped: %s, %v; want told it will be fenced, not the result", a.x.text(), a.err)
	}
	effects := r.effectCount()

	disk.Repair()
	w2 := r.wrap("--lease-secs", "2")
	if x := call(t, w2.Session, "charge", `{"amount":1,"order":"during"}`); x.IsError || r.effectCount() != effects+1 {
		t.Errorf("the refused call once the disk was repaired: %s; %d effects, want it run and %d", x.text(), r.effectCount(), effects+1)
	}
	if x := call(t, w2.Session, "charge", `{"amount":1,"order":"before"}`); !x.replayed() || x.same() != first.same() {
		t.Errorf("the recorded call once the disk was repaired: replayed %v, %s", x.replayed(), x.text())
	}
	if x := call(t, w2.Session, "slow", slow); !x.IsError || !strings.Contains(x.text(), "NOT executed again") || r.effectCount() != effects+1 {
		t.Errorf("the call whose outcome was lost, once the disk was repaired: %s; %d effects, want it fenced and %d", x.text(), r.effectCount(), effects+1)
	}
}

type cmdOut struct {
	out string
	err error
}

// ledgerCmd runs `effectfence ledger VERB --ledger <r's ledger>` as an operator would.
func ledgerCmd(t *testing.T, r *rig, verb string) cmdOut {
	t.Helper()
	cmd := exec.Command(efBin, "ledger", verb, "--ledger", r.ledger)
	cmd.Env = r.env()
	out, err := cmd.CombinedOutput()
	return cmdOut{string(out), err}
}
