package wrap_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/diskfull"
)

// TestFullDiskLosesNothing: wrap's SQLite ledger on a disk that fills (a real tmpfs). A call
// whose claim cannot be written is not sent, and says why; a call whose outcome cannot be
// written once it ran waits, and is answered once the disk has room and the outcome is
// recorded; its duplicate replays it. The tool runs once per call whatever the disk does.
func TestFullDiskLosesNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	disk := diskfull.Mount(t, 8<<20)
	r.ledger = filepath.Join(disk, "ledger.db")
	w := r.wrap()

	filler := diskfull.Fill(t, disk)
	x := call(t, w.Session, "charge", `{"amount":100,"order":"full-at-claim"}`)
	if !x.IsError || !strings.Contains(x.text(), "NOT executed") || r.effectCount() != 0 {
		t.Fatalf("a call on a full disk: %s (isError %v), %d executions; want it refused, not executed", x.text(), x.IsError, r.effectCount())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if x := call(t, w.Session, "charge", `{"amount":100,"order":"full-at-claim"}`); x.IsError || r.effectCount() != 1 {
		t.Fatalf("the same call once the disk had room: %s, %d executions; want it run once", x.text(), r.effectCount())
	}

	// The disk fills while a call runs: its outcome cannot be recorded until there is room.
	type answer struct {
		x   result
		err error
	}
	got := make(chan answer, 1)
	args := `{"ms":1500,"tag":"full-at-outcome"}`
	go func() {
		x, err := callE(w.Session, "slow", args)
		got <- answer{x, err}
	}()
	waitFor(t, "the slow call to start", func() bool { return strings.Contains(w.log.String(), "mcptest: slow tag=full-at-outcome started") })
	filler = diskfull.Fill(t, disk)
	waitFor(t, "the slow call to end", func() bool { return r.effectCount() == 2 })
	select {
	case a := <-got:
		t.Fatalf("answered while its outcome could not be recorded: %s, %v", a.x.text(), a.err)
	case <-time.After(time.Second):
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil || a.x.IsError || !strings.Contains(a.x.text(), "slow done") {
		t.Fatalf("the slow call once the disk had room: %s, %v", a.x.text(), a.err)
	}
	again := call(t, w.Session, "slow", args)
	if !again.replayed() || again.same() != a.x.same() || r.effectCount() != 2 {
		t.Fatalf("its duplicate: replayed %v, %s; %d executions; want the recorded result and 2", again.replayed(), again.text(), r.effectCount())
	}
}

// TestFullDiskPastTheLeaseHoldsTheAnswer: the disk stays full longer than wrap retries an
// outcome before leaving it in the spool (SettleWait, the lease: 1 s here), and the spool is
// on the same full disk, so the outcome is in neither: only in wrap's memory. Before, wrap
// answered the agent with the result then, and a kill -9 lost the outcome: the agent had
// seen the charge, every duplicate was told its outcome was unknown. Now the answer waits
// until the ledger or the spool takes the outcome; killed before that, wrap has answered
// nothing, and the duplicate is fenced (never run again); stopped (SIGTERM), it does not wait
// for the disk: it exits without answering, the outcome lost as with a kill.
func TestFullDiskPastTheLeaseHoldsTheAnswer(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"disk-back", "killed", "stopped"} {
		t.Run(end, func(t *testing.T) {
			r := newRig(t)
			disk := diskfull.Mount(t, 8<<20)
			r.ledger = filepath.Join(disk, "ledger.db")
			w := r.wrap("--lease-secs", "1")
			type answer struct {
				x   result
				err error
			}
			got := make(chan answer, 1)
			args := `{"ms":1500,"tag":"full-past-lease"}`
			go func() {
				x, err := callE(w.Session, "slow", args)
				got <- answer{x, err}
			}()
			waitFor(t, "the slow call to start", func() bool { return strings.Contains(w.log.String(), "slow tag=full-past-lease started") })
			filler := diskfull.Fill(t, disk)
			waitFor(t, "the outcome to be held in memory only", func() bool {
				return strings.Contains(w.log.String(), "held in this process's memory")
			})
			// Three more SettleWaits: the answer must still wait.
			select {
			case a := <-got:
				t.Fatalf("answered while its outcome was in neither the ledger nor the spool: %s, %v; wrap log:\n%s", a.x.text(), a.err, w.log.String())
			case <-time.After(3 * time.Second):
			}
			if end != "disk-back" {
				sig := syscall.SIGKILL
				if end == "stopped" {
					sig = syscall.SIGTERM
				}
				if err := syscall.Kill(w.Pid(), sig); err != nil {
					t.Fatal(err)
				}
				select {
				case <-w.Done():
				case <-time.After(30 * time.Second):
					t.Fatalf("wrap did not exit after %v with the disk full; log:\n%s", sig, w.log.String())
				}
				// Killed: no answer. Stopped: told the outcome is unknown, not given the result.
				a := <-got
				if end == "stopped" && a.err != nil {
					t.Fatalf("a stopped wrap left the call unanswered: %v", a.err)
				}
				if a.err == nil && (!a.x.IsError || !strings.Contains(a.x.text(), "NOT be executed again") || strings.Contains(a.x.text(), "slow done")) {
					t.Fatalf("a wrap that ended (%v) before its outcome was kept answered: %s (isError %v)", sig, a.x.text(), a.x.IsError)
				}
				if end == "stopped" && !strings.Contains(w.log.String(), "stopping with the result in neither the ledger nor its spool") {
					t.Errorf("the stop did not say the outcome ends with the process; log:\n%s", w.log.String())
				}
			}
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			if end == "disk-back" {
				a := <-got
				if a.err != nil || a.x.IsError || !strings.Contains(a.x.text(), "slow done") {
					t.Fatalf("the slow call once the disk had room: %s, %v", a.x.text(), a.err)
				}
				again := call(t, w.Session, "slow", args)
				if !again.replayed() || again.same() != a.x.same() || r.effectCount() != 1 {
					t.Fatalf("its duplicate: replayed %v, %s; %d executions; want the recorded result and 1", again.replayed(), again.text(), r.effectCount())
				}
				return
			}
			// The outcome ended with the process: the next wrap fences the intent.
			w2 := r.wrap("--lease-secs", "1")
			again := call(t, w2.Session, "slow", args)
			if !again.IsError || !strings.Contains(again.text(), "NOT executed again") || r.effectCount() != 1 {
				t.Fatalf("the duplicate after the kill: %s (isError %v), %d executions; want it fenced and 1", again.text(), again.IsError, r.effectCount())
			}
		})
	}
}
