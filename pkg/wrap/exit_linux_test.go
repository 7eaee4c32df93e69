package wrap_test

import (
	"context"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A call whose server closed its stdout under it may still run in the server process until
// that exits: mcpstdio stops it at once, but after waits (the end of its stdin, then SIGTERM).
// Its claim is recorded as unknown only once the process has exited. Before, it was recorded
// unknown within 200 ms, and with wrap (its holder) and the server (its group's leader) both
// running, an operator's clear went through for the 2 s the server still ran the call: the
// next attempt would have run it again.
func TestUnknownOnlyOnceTheServerExited(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	w := r.wrap()
	answered := callInBackground(w.Session, "die", `{"close_stdout":true,"tag":"half"}`)
	led := r.openLedger()
	claim := waitForClaim(t, led)
	leader := groupLeader(t, w)
	var a called
	for over := false; !over; {
		select {
		case a = <-answered:
			over = true
		case <-time.After(5 * time.Millisecond):
		}
		rec, err := led.Status(context.Background(), claim.Intent)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State == fence.StateUnknown && alive(leader) {
			t.Fatalf("the claim is unknown while its server (pid %d) still runs, and an operator's clear would free it", leader)
		}
	}
	if a.err != nil || !a.x.IsError {
		t.Fatalf("the call whose server closed its stdout: %+v %v, want a tool error", a.x.text(), a.err)
	}
	if alive(leader) {
		t.Fatalf("the call was answered while its server (pid %d) still runs", leader)
	}
	if rec, err := led.Status(context.Background(), claim.Intent); err != nil || rec.State != fence.StateUnknown {
		t.Fatalf("its intent: %+v %v, want unknown", rec, err)
	}
	// Held no longer than that: the server is gone, and nothing it started runs.
	if code, stderr := r.ledgerCmd("clear", claim.Intent, "--reason", "checked"); code != 0 {
		t.Fatalf("clear once the server has exited: exit %d, %s", code, stderr)
	}
}
