package wrap_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestClaimWhoseSyncFailedIsReleasedAfterAKill: the ledger's disk fails the fsync of a claim's
// COMMIT (EIO; strace fails every fsync and fdatasync of the real wrap process, the data left
// in the page cache as after a disk's write error). The call is answered NOT executed, and it
// must stay so: SQLite wrote the claim's frames to the log before the fsync, and a wrap killed
// (kill -9) before it writes again leaves them for the next open, which finds the claim
// committed, held by a process gone. Before 2026-12-07 the retry in the next wrap was then
// refused as of unknown outcome ("the effect may have happened"), though the call never ran;
// now the next wrap releases the claim, the audit trail saying why, and the retry runs the call
// once. With the disk back and wrap alive, the retry runs once too, and no note of the claim
// is left in the spool.
func TestClaimWhoseSyncFailedIsReleasedAfterAKill(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"killed", "disk-back"} {
		t.Run(end, func(t *testing.T) {
			r := newRig(t)
			rw, before := r.warmWrap(t, "--lease-secs", "3")
			stop := diskfull.FailSyncs(t, rw.cmd.Process.Pid)
			got := rw.roundTrip(t, chargeLine(2, "eio"))
			if !strings.Contains(got, `"isError":true`) || !strings.Contains(got, "NOT executed") || r.effectCount() != before {
				t.Fatalf("a call whose claim's fsync failed: %s; %d effects, want it refused and %d", got, r.effectCount(), before)
			}
			after := rw
			if end == "killed" {
				if err := rw.cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				_ = rw.cmd.Wait()
				stop()
				after = r.initializedRawWrap("--lease-secs", "3")
			} else {
				stop()
			}
			if got := after.roundTrip(t, chargeLine(3, "eio")); strings.Contains(got, `"isError":true`) || r.effectCount() != before+1 {
				t.Fatalf("the retry once the disk was back (%s): %s; %d effects, want it run and %d", end, got, r.effectCount(), before+1)
			}
			if got := after.roundTrip(t, chargeLine(4, "eio")); !strings.Contains(got, `"effectfence/replayed":true`) || r.effectCount() != before+1 {
				t.Fatalf("its duplicate: %s; %d effects, want a replay and %d", got, r.effectCount(), before+1)
			}
			if end == "killed" {
				// The claim did land: the next wrap released it, saying why.
				var released []string
				err := r.openLedger().Store().View(context.Background(), func(tx fence.Tx) error {
					return tx.Events("", func(ev fence.Event) bool {
						if ev.Kind == fence.EventRelease {
							released = append(released, ev.Reason)
						}
						return true
					})
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(released) != 1 || !strings.Contains(released[0], "never run") {
					t.Errorf("releases %q, want the failed claim's, saying its call never ran", released)
				}
				return
			}
			waitFor(t, "the claim's note to leave the spool", func() bool {
				notes, _ := os.ReadDir(r.ledger + ".spool")
				for _, n := range notes {
					if strings.Contains(n.Name(), "-unsent-") {
						return false
					}
				}
				return true
			})
		})
	}
}

// TestOutcomeWhoseSyncFailsWaitsForTheDisk: every fsync of a real wrap fails (EIO, strace)
// while a call runs in the server, so neither the ledger nor the spool beside it can make its
// outcome durable (the spool's file is synced before it counts). The answer must wait, the
// outcome in memory only; once the disk syncs again the outcome is recorded, the call
// answered with its result, and its duplicate replays it. The tool runs once.
func TestOutcomeWhoseSyncFailsWaitsForTheDisk(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--lease-secs", "1")
	if x := call(t, w.Session, "charge", `{"amount":1,"order":"warm"}`); x.IsError {
		t.Fatalf("the first call: %s", x.text())
	}
	type answer struct {
		x   result
		err error
	}
	got := make(chan answer, 1)
	args := `{"ms":800,"tag":"sync-fails"}`
	go func() {
		x, err := callE(w.Session, "slow", args)
		got <- answer{x, err}
	}()
	waitFor(t, "the slow call to start", func() bool { return strings.Contains(w.log.String(), "slow tag=sync-fails started") })
	stop := diskfull.FailSyncs(t, w.Pid())
	var early *answer
	waitFor(t, "the outcome to be held in memory only, or an answer", func() bool {
		select {
		case a := <-got:
			early = &a
			return true
		default:
		}
		return strings.Contains(w.log.String(), "the call's answer waits until one of them takes it")
	})
	if early != nil {
		t.Fatalf("answered while its outcome could not be made durable: %s, %v; wrap log:\n%s", early.x.text(), early.err, w.log.String())
	}
	// Two more lease-long rounds of the ledger and the spool failing: still no answer.
	select {
	case a := <-got:
		t.Fatalf("answered while its outcome could not be made durable: %s, %v; wrap log:\n%s", a.x.text(), a.err, w.log.String())
	case <-time.After(2 * time.Second):
	}
	stop()
	a := <-got
	if a.err != nil || a.x.IsError || !strings.Contains(a.x.text(), "slow done") {
		t.Fatalf("the slow call once the disk synced again: %s, %v", a.x.text(), a.err)
	}
	if again := call(t, w.Session, "slow", args); !again.replayed() || again.same() != a.x.same() || r.effectCount() != 2 {
		t.Fatalf("its duplicate: replayed %v, %s; %d effects, want the recorded result and 2", again.replayed(), again.text(), r.effectCount())
	}
}
