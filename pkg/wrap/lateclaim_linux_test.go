package wrap_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestClaimThatLandsAfterItsCallWasAnsweredIsReleased: docs/wrap.md says a call whose claim's
// write has not returned 10 s after --wait and the lease is answered store_error (NOT
// executed), and a claim recorded once the disk answers is released by wrap, its call never
// sent, so the agent's retry runs the call once. Here the claim's commit reaches the ledger's
// file and its fsync is held after the kernel did it (strace), past the call's answer: the
// claim lands after the answer, and must end released, the audit trail saying why, with no
// intent left in flight or unknown; the retry then runs the call once and its duplicate
// replays it.
func TestClaimThatLandsAfterItsCallWasAnsweredIsReleased(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw, before := r.warmWrap(t, "--lease-secs", "3", "--wait", "2s")

	release := diskfull.StallSyncs(t, rw.cmd.Process.Pid, 25*time.Second)
	rw.refusedWhileHeld(t, chargeLine(2, "late"), release, "its claim's fsync held")
	if n := r.effectCount(); n != before {
		t.Fatalf("%d effects after the refused call, want %d: it ran", n, before)
	}

	// The claim lands now; wrap releases it, saying why, and nothing stays in flight or unknown.
	led := r.openLedger()
	var others, released []fence.Event
	var recs []*fence.Record
	for deadline := time.Now().Add(30 * time.Second); ; {
		others, released, recs = nil, nil, nil
		err := led.Store().View(context.Background(), func(tx fence.Tx) error {
			if err := tx.Events("", func(ev fence.Event) bool {
				if ev.Kind == fence.EventRelease {
					released = append(released, ev)
				} else {
					others = append(others, ev)
				}
				return true
			}); err != nil {
				return err
			}
			return tx.Scan(fence.Filter{}, func(rec *fence.Record) bool {
				recs = append(recs, rec)
				return true
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(released) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, ev := range append(others, released...) {
		t.Logf("event %s at %s by %s, claim %d (%s): %s", ev.Kind, ev.At.Format("15:04:05.000"), ev.Who, ev.Token, ev.State, ev.Reason)
	}
	if len(released) != 1 {
		t.Fatalf("%d releases 30 s after the claim's fsync returned, want 1: %+v", len(released), released)
	}
	t.Logf("released: %s", released[0].Reason)
	if !strings.Contains(released[0].Reason, "never sent") {
		t.Errorf("the release's reason %q does not say the call was never sent", released[0].Reason)
	}
	for _, rec := range recs {
		if rec.State != fence.StateDone {
			t.Errorf("intent %s left %s: %s", rec.Intent, rec.State, rec.Reason)
		}
	}

	// The retry the agent was told it may send runs the call, once; its duplicate replays.
	if got := rw.roundTrip(t, chargeLine(3, "late")); strings.Contains(got, `"isError":true`) {
		t.Fatalf("the retry after the late claim was released: %s", got)
	}
	if n := r.effectCount(); n != before+1 {
		t.Fatalf("%d effects after the retry ran, want %d", n, before+1)
	}
	if got := rw.roundTrip(t, chargeLine(4, "late")); !strings.Contains(got, `"effectfence/replayed":true`) {
		t.Fatalf("a duplicate of the retry that ran: %s; want it replayed", got)
	}
}

// TestRetrySentWhileTheLateClaimIsHeldIsNotToldTheCallMayHaveRun: the agent told store_error
// (NOT executed, a retry may run it) retries at once, while the first claim's commit still
// waits for the disk. When the disk answers, the first claim lands, its lease long lapsed, and
// the retry, queued behind it for the ledger's writer, meets it: the retry must not be told
// the call may have run (prior_failure, unknown), since its call was never sent; it is
// answered as one whose ledger did not confirm it, or runs the call, and the next retry runs
// it or replays it: the effect once in all.
//
// Until 2026-12-06 the retry queued behind the landing claim could read it before wrap's
// release did, its lease lapsed and its holder this very process, and the lease rules made it
// unknown ("holder alive but silent"): the retry was refused prior_failure though the call
// never ran (2 runs of 2 at the end of 2026-12-06). The engine now knows the claim given up
// (fence.Engine.PrepareWaitBeside) and releases it when a pass meets it. Root, strace.
func TestRetrySentWhileTheLateClaimIsHeldIsNotToldTheCallMayHaveRun(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw, before := r.warmWrap(t, "--lease-secs", "3", "--wait", "2s")

	release := diskfull.StallSyncs(t, rw.cmd.Process.Pid, 25*time.Second)
	got := rw.roundTrip(t, chargeLine(2, "late"))
	if !strings.Contains(got, "NOT executed") {
		release()
		t.Fatalf("the call whose claim's fsync is held: %s; want NOT executed", got)
	}
	rw.send(t, chargeLine(3, "late"))
	time.Sleep(time.Second)
	release() // the first claim lands, the retry queued behind it
	line, err := rw.out.ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to the retry sent during the stall: %v", err)
	}
	got = strings.TrimSpace(line)
	t.Logf("the retry sent during the stall: %s", got)
	if strings.Contains(got, "prior_failure") || strings.Contains(got, "unknown") {
		t.Errorf("the retry sent while the first claim was held was told the call may have run: %s", got)
	}
	for id, deadline := 4, time.Now().Add(30*time.Second); strings.Contains(got, `"isError":true`); id++ {
		if time.Now().After(deadline) {
			t.Fatalf("retries still refused 30 s after the disk answered: %s", got)
		}
		time.Sleep(200 * time.Millisecond)
		got = rw.roundTrip(t, chargeLine(id, "late"))
	}
	if n := r.effectCount(); n != before+1 {
		t.Fatalf("%d effects after a retry ran, want %d", n, before+1)
	}
	for _, recs := range r.records(t) {
		for _, rec := range recs {
			if rec.State != fence.StateDone {
				t.Errorf("intent %s left %s: %s", rec.Intent, rec.State, rec.Reason)
			}
		}
	}
}

// TestClaimThatLandsAsWrapStopsDoesNotFenceTheRetry: the agent told store_error (NOT
// executed, a retry may run it) stops wrap as MCP clients do (stdin closed, SIGTERM, SIGKILL)
// while the claim's commit still waits for the disk: the commit's data is written and synced,
// its answer never read, as when a process is killed while its fsync hangs on a disk that
// then answers. The claim is in the ledger with nobody left to release it, and the next wrap
// on that ledger finds its holder gone and makes it unknown ("the effect may have happened"):
// the agent's retry was refused prior_failure until an operator cleared the intent, though the
// call was never sent (2 runs of 2, 2026-12-06): wrap's release of a late claim lived in the
// process's memory only. It now leaves a note in the spool as the call is answered, which
// the next wrap applies once the first is gone (fence.Engine.PrepareWaitBeside). Root,
// strace.
func TestClaimThatLandsAsWrapStopsDoesNotFenceTheRetry(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw, before := r.warmWrap(t, "--lease-secs", "3", "--wait", "2s")

	release := diskfull.StallSyncs(t, rw.cmd.Process.Pid, 30*time.Second)
	if got := rw.roundTrip(t, chargeLine(2, "late")); !strings.Contains(got, "NOT executed") {
		release()
		t.Fatalf("the call whose claim's fsync is held: %s; want NOT executed", got)
	}
	// Stopped as MCP clients stop a server: stdin closed, SIGTERM 2 s later, SIGKILL 2 s
	// after that.
	stopped := time.Now()
	rw.in.Close()
	exited := make(chan error, 1)
	go func() { exited <- rw.cmd.Wait() }()
	select {
	case err := <-exited:
		t.Logf("wrap stopped (%v) %s after its stdin closed, the claim's fsync held", err, time.Since(stopped).Round(100*time.Millisecond))
	case <-time.After(2 * time.Second):
		_ = rw.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			t.Logf("wrap stopped (%v) on SIGTERM, the claim's fsync held", err)
		case <-time.After(2 * time.Second):
			_ = rw.cmd.Process.Kill()
			t.Logf("wrap killed (%v), still running 4 s after its stdin closed, the claim's fsync held", <-exited)
		}
	}
	release()
	t.Logf("the first wrap's stderr:\n%s", rw.log.String())
	spooled, err := fence.SpoolFiles(r.ledger + ".spool")
	t.Logf("its spool after the stop: %v (%v)", spooled, err)
	// Looked at read-only: r.records opens the ledger as a process does (store.Open), whose
	// drain of the spool released the claim itself, before the next wrap was started, and
	// showed no claim at all.
	late := "" // the intent of the claim that landed, if it did
	for _, rec := range r.recordsReadOnly(t) {
		t.Logf("after the stop: intent %s %s (claim %d): %s", rec.Intent, rec.State, rec.Token, rec.Reason)
		if rec.State != fence.StateDone {
			late = rec.Intent
		}
	}

	rw2 := r.initializedRawWrap("--lease-secs", "3", "--wait", "2s")
	got := rw2.roundTrip(t, chargeLine(3, "late"))
	t.Logf("the retry through the next wrap: %s", got)
	if strings.Contains(got, `"isError":true`) {
		t.Errorf("the retry of a call answered NOT executed was refused: %s\nstderr:\n%s", got, rw2.log.String())
	}
	if late == "" {
		t.Logf("the claim had not landed once the first wrap stopped: the next wrap had nothing to release")
	} else if _, out, _ := r.ledgerOut("show", late, "--events", "0"); !strings.Contains(out, "so it was never sent") {
		t.Errorf("the claim that landed as the first wrap stopped, after the retry through the next wrap:\n%s\nwant its release, saying its call was never sent", out)
	}
	if n := r.effectCount(); n > before+1 {
		t.Fatalf("%d effects, want at most %d", n, before+1)
	}
}

// recordsReadOnly lists the records of r's ledger without changing it: no drain of its spool,
// no lease rules (store.Open, which r.records uses, applies both).
func (r *rig) recordsReadOnly(t *testing.T) []*fence.Record {
	t.Helper()
	st, err := sqlite.Open(context.Background(), r.ledger, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out []*fence.Record
	if err := st.View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(rec *fence.Record) bool {
			out = append(out, rec)
			return true
		})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
