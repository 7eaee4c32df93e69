package wrap_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/internal/diskfull"
)

// TestLedgerOnADeviceFailingWrites: a real wrap's SQLite ledger (and its spool, beside it) on
// ext4 on a loop device whose writes start failing while a call runs: its backing file is on a
// tmpfs filled from outside, so the kernel logs "critical space allocation error", ext4's
// writeback and fsync fail (ENOSPC, then EIO) and its journal aborts, which turns it read-only
// (emergency_ro) under errors=continue as under errors=remount-ro. The call's outcome is in
// neither the ledger nor the spool: its answer waits (or, when every block its commit wrote
// was one the device had taken before, it is recorded and answered); a new call is refused,
// not run; a duplicate of a recorded call replays it; `ledger check` reads the ledger. wrap
// killed answers nothing, stopped says the call will be fenced, not its result. Once the disk
// is repaired (e2fsck, mounted again, the page cache's copies of what never reached the device
// gone), a new wrap fences the call whose outcome was lost (replays it, if answered), runs the
// refused one once and replays the recorded one: nothing runs twice.
func TestLedgerOnADeviceFailingWrites(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ opts, end string }{{"errors=remount-ro", "killed"}, {"errors=continue", "stopped"}} {
		t.Run(strings.TrimPrefix(c.opts, "errors=")+"/"+c.end, func(t *testing.T) {
			failingDisk(t, c.opts, c.end)
		})
	}
}

func failingDisk(t *testing.T, opts, end string) {
	r := newRig(t)
	disk := diskfull.MountFailing(t, "ext4", opts, false)
	r.ledger = filepath.Join(disk.Dir, "ledger.db")
	w := r.wrap("--lease-secs", "2")
	first := call(t, w.Session, "charge", `{"amount":1,"order":"before"}`)
	if first.IsError || r.effectCount() != 1 {
		t.Fatalf("the first call: %s, %d effects", first.text(), r.effectCount())
	}

	// While a call runs, the device fails: its outcome's commit meets it, unless every page
	// it writes is on a block the device had taken before (one freed by a file removed).
	type answer struct {
		x   result
		err error
	}
	got := make(chan answer, 1)
	slow := `{"ms":500,"tag":"failing"}`
	go func() {
		x, err := callE(w.Session, "slow", slow)
		got <- answer{x, err}
	}()
	waitFor(t, "the slow call to start", func() bool { return strings.Contains(w.log.String(), "slow tag=failing started") })
	disk.Break()
	waitFor(t, "the slow call to end", func() bool { return r.effectCount() == 2 })
	var answered *answer
	waitFor(t, "the slow call's answer, or its outcome held", func() bool {
		select {
		case a := <-got:
			answered = &a
			return true
		default:
		}
		return strings.Contains(w.log.String(), "the call's answer waits until one of them takes it")
	})
	if answered != nil && (answered.err != nil || answered.x.IsError) {
		t.Fatalf("the slow call: %s, %v; want its result, or its answer held", answered.x.text(), answered.err)
	}
	t.Logf("the slow call's outcome: answered %v; the file system: %s", answered != nil, disk.Options())

	// A new call meanwhile is refused, not run (or runs and is recorded, its blocks taken
	// before); a duplicate of a recorded call replays it.
	during := call(t, w.Session, "charge", `{"amount":1,"order":"during"}`)
	ranDuring := !during.IsError
	if during.IsError && (!strings.Contains(during.text(), "NOT executed") || r.effectCount() != 2) {
		t.Errorf("a new call while the device fails: %s, %d effects; want it refused, not executed, and 2", during.text(), r.effectCount())
	}
	if x := call(t, w.Session, "charge", `{"amount":1,"order":"before"}`); !x.replayed() || x.same() != first.same() {
		t.Errorf("a duplicate of the recorded call: replayed %v, %s; want the recorded result", x.replayed(), x.text())
	}
	if check := ledgerCmd(t, r, "check"); check.err != nil {
		t.Errorf("ledger check while the device fails: %v\n%s\nwant it read", check.err, check.out)
	}

	sig := syscall.SIGKILL
	if end == "stopped" {
		sig = syscall.SIGTERM
	}
	if err := syscall.Kill(w.Pid(), sig); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	if answered == nil {
		a := <-got
		switch {
		case end == "killed" && a.err == nil:
			t.Errorf("the slow call once wrap was killed: %s; want no answer", a.x.text())
		case end == "stopped" && (a.err != nil || !a.x.IsError || !strings.Contains(a.x.text(), "NOT be executed again") || strings.Contains(a.x.text(), "slow done")):
			t.Errorf("the slow call once wrap stopped: %s, %v; want told it will be fenced, not the result", a.x.text(), a.err)
		}
	}
	effects := r.effectCount()

	disk.Repair() // what never reached the device is gone with the page cache
	w2 := r.wrap("--lease-secs", "2")
	x := call(t, w2.Session, "slow", slow)
	switch {
	case answered != nil && (!x.replayed() || x.same() != answered.x.same()):
		t.Errorf("the slow call answered with its result, once the disk was repaired: replayed %v, %s; want the result it was answered", x.replayed(), x.text())
	case answered == nil && !x.replayed() && (!x.IsError || !strings.Contains(x.text(), "NOT executed again")):
		t.Errorf("the slow call whose outcome was lost, once the disk was repaired: %s; want it fenced as unknown", x.text())
	}
	if r.effectCount() != effects {
		t.Errorf("the slow call ran again: %d effects, want %d", r.effectCount(), effects)
	}
	y := call(t, w2.Session, "charge", `{"amount":1,"order":"during"}`)
	switch {
	case ranDuring && (!y.replayed() || y.same() != during.same()):
		t.Errorf("the call recorded while the device failed, once the disk was repaired: replayed %v, %s", y.replayed(), y.text())
	case !ranDuring && y.IsError && (!strings.Contains(y.text(), "NOT executed") || r.effectCount() != effects):
		t.Errorf("the refused call once the disk was repaired: %s; %d effects", y.text(), r.effectCount())
	case !ranDuring && y.IsError:
		// Its claim's frames reached the device though its fsync failed, and the spool, on
		// the read-only file system, could not take the note that releases it.
		t.Logf("the refused call once the disk was repaired is fenced: %s", y.text())
	case !ranDuring && r.effectCount() != effects+1:
		t.Errorf("the refused call once the disk was repaired: %s; %d effects, want it run once and %d", y.text(), r.effectCount(), effects+1)
	}
	if z := call(t, w2.Session, "charge", `{"amount":1,"order":"before"}`); !z.replayed() || z.same() != first.same() {
		t.Errorf("the first call once the disk was repaired: replayed %v, %s", z.replayed(), z.text())
	}
	if check := ledgerCmd(t, r, "check"); check.err != nil {
		t.Errorf("ledger check once the disk was repaired: %v\n%s", check.err, check.out)
	}
}
