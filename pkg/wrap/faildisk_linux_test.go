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
// (emergency_ro) under errors=continue as under errors=remount-ro; btrfs aborts its
// transaction and turns read-only too (the "btrfs" case). The call's outcome is in
// neither the ledger nor the spool: its answer waits (or, when every block its commit wrote
// was one the device had taken before, it is recorded and answered); a new call is refused,
// not run; a duplicate of a recorded call replays it; `ledger check` reads the ledger. wrap
// killed answers nothing, stopped says the call will be fenced, not its result. Once the disk
// is repaired (e2fsck, mounted again, the page cache's copies of what never reached the device
// gone), a new wrap fences the call whose outcome was lost (replays it, if answered), runs the
// refused one once and replays the recorded one: nothing runs twice.
func TestLedgerOnADeviceFailingWrites(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ fs, opts, end string }{{"ext4", "errors=remount-ro", "killed"}, {"ext4", "errors=continue", "stopped"}, {"btrfs", "", "stopped"}} {
		name := c.fs + "/" + c.end
		if c.opts != "" {
			name = c.fs + "/" + strings.TrimPrefix(c.opts, "errors=") + "/" + c.end
		}
		t.Run(name, func(t *testing.T) {
			failingDisk(t, c.fs, c.opts, c.end)
		})
	}
}

func failingDisk(t *testing.T, fs, opts, end string) {
	r := newRig(t)
	disk := diskfull.MountFailing(t, fs, opts, false)
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

// TestReceiptsOnAFailedCommitsFramesOutliveTheCache: fsyncgate under a real wrap. The ledger's
// ext4 (errors=continue, its journal on blocks the device still takes) stays writable while
// the device fails the writes of the log's new blocks. A call runs, and its outcome's COMMIT
// fails at its fsync, every try (or its claim's does, and it is refused): its frames stay in
// the page cache, clean, never on the disk. wrap is killed (the answer was held), the device
// mended, and a new wrap opens the ledger: SQLite reads those frames from the cache and counts
// the commit that failed. The new wrap records a call on top of them, replays the other, and is
// killed too; then the disk is unmounted and mounted again (the cache gone, as after a power
// cut). Before 2026-12-07 the log on the disk then held zeros where the failed frames were,
// SQLite ignored it from there on, and the call the second wrap had answered as recorded was
// gone with the one it had replayed: `ledger check` found the log "damaged at frame 20 ...
// transactions committed after it (frames 29 and 34) are whole", and wrap refused to start
// until an operator dropped those decisions, after which the calls would run again. Now the
// open copies the log into the file (sqlite's syncLog), the receipts stay, and nothing runs
// twice.
func TestReceiptsOnAFailedCommitsFramesOutliveTheCache(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	disk := diskfull.MountFailing(t, "ext4", "errors=continue", true)
	r.ledger = filepath.Join(disk.Dir, "ledger.db")
	w := r.wrap("--lease-secs", "2")
	first := call(t, w.Session, "charge", `{"amount":1,"order":"before"}`)
	if first.IsError || r.effectCount() != 1 {
		t.Fatalf("the first call: %s, %d effects", first.text(), r.effectCount())
	}

	disk.Break()
	// A call meets the failing device at its claim's COMMIT (refused, not run) or at its
	// outcome's (it ran; its answer waits while every try fails).
	during := `{"amount":1,"order":"during"}`
	got := make(chan result, 1)
	go func() {
		x, err := callE(w.Session, "charge", during)
		if err == nil {
			got <- x
		}
	}()
	claimFailed := false
	waitFor(t, "the call's claim refused, or its outcome held", func() bool {
		select {
		case x := <-got:
			if !x.IsError || !strings.Contains(x.text(), "NOT executed") || r.effectCount() != 1 {
				t.Fatalf("a call while the device fails: %s, %d effects; want it refused, not executed, or its answer held", x.text(), r.effectCount())
			}
			claimFailed = true
			return true
		default:
		}
		return strings.Contains(w.log.String(), "the call's answer waits until one of them takes it")
	})
	t.Logf("the failed COMMIT was the call's claim's: %v", claimFailed)
	if err := syscall.Kill(w.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	disk.Mend()
	if opts := disk.Options(); strings.Contains(opts, "emergency_ro") || disk.ReadOnly() {
		t.Fatalf("the file system turned read-only (%s): the journal was meant to keep working", opts)
	}

	w2 := r.wrap("--lease-secs", "2")
	effects := r.effectCount()
	after := call(t, w2.Session, "charge", `{"amount":1,"order":"after"}`)
	if after.IsError || r.effectCount() != effects+1 {
		t.Fatalf("a new call once the device was mended: %s, %d effects, want it run and %d", after.text(), r.effectCount(), effects+1)
	}
	again := call(t, w2.Session, "charge", during)
	t.Logf("the call once the device was mended: replayed %v, isError %v: %s", again.replayed(), again.IsError, again.text())
	if claimFailed && again.IsError && (!strings.Contains(again.text(), "NOT executed") || r.effectCount() != effects+1) {
		t.Errorf("the refused call once the device was mended: %s, %d effects", again.text(), r.effectCount())
	}
	if claimFailed && !again.IsError && r.effectCount() != effects+2 {
		t.Errorf("the refused call once the device was mended: %s, %d effects, want it run once and %d", again.text(), r.effectCount(), effects+2)
	}
	if !claimFailed && (!again.replayed() && !strings.Contains(again.text(), "NOT executed again") || r.effectCount() != effects+1) {
		t.Errorf("the call that ran, once the device was mended: %s, %d effects; want its outcome replayed or fenced, and %d", again.text(), r.effectCount(), effects+1)
	}
	if err := syscall.Kill(w2.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w2.Done()
	effects = r.effectCount()

	disk.Repair() // unmounted: the page cache's copies are gone
	if check := ledgerCmd(t, r, "check"); check.err != nil {
		t.Fatalf("ledger check once the disk was mounted again: %v\n%s", check.err, check.out)
	}
	w3 := r.wrap("--lease-secs", "2")
	if x := call(t, w3.Session, "charge", `{"amount":1,"order":"after"}`); !x.replayed() || x.same() != after.same() || r.effectCount() != effects {
		t.Errorf("the call the second wrap recorded, after the cache was gone: replayed %v, %s; %d effects, want the recorded result and %d", x.replayed(), x.text(), r.effectCount(), effects)
	}
	if x := call(t, w3.Session, "charge", `{"amount":1,"order":"before"}`); !x.replayed() || x.same() != first.same() {
		t.Errorf("the first call: replayed %v, %s", x.replayed(), x.text())
	}
	if x := call(t, w3.Session, "charge", during); r.effectCount() != effects || (!again.IsError && (!x.replayed() || x.same() != again.same())) {
		t.Errorf("the call made while the device failed, after the cache was gone: replayed %v, %s; %d effects, want %d", x.replayed(), x.text(), r.effectCount(), effects)
	}
}
