package wrap_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A task wrap stops following while its server runs (here the server forgets it: "Task not
// found", as the TypeScript SDK answers once a task's ttl lapsed, finished or not) may still be
// finished by that server. Its intent is unknown, and an operator's clear is refused while the
// server runs: before 2026-12-06 the claim, whose holder (wrap) and carrier's leader (the
// server) both ran, was taken as answered for by the live server, the clear went through at
// once, and the next attempt could run the call while the task still ran. Once the server has
// stopped, the clear goes through.
func TestTaskGivenUpIsHeldWhileItsServerRuns(t *testing.T) {
	t.Parallel()
	needProc(t)
	r, w := taskWrap(t)
	startSlowTask(t, w, `{"tag":"held","forget":true}`, 1000, "forgotten-")
	retryIsFenced(t, r, w, `{"tag":"held","forget":true}`, "a task the server forgot", w)
	led := r.openLedger()
	var recs []fence.Record
	err := led.Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(rec *fence.Record) bool {
			recs = append(recs, *rec)
			return true
		})
	})
	if err != nil || len(recs) != 1 || recs[0].State != fence.StateUnknown {
		t.Fatalf("the ledger: %+v %v; want the one task's intent unknown", recs, err)
	}
	intent := recs[0].Intent
	leader := groupLeader(t, w)
	code, stderr := r.ledgerCmd("clear", intent, "--reason", "checked")
	if code == 0 || !strings.Contains(stderr, "process group "+strconv.Itoa(leader)) {
		t.Fatalf("clear while the task's server (pid %d) runs: exit %d, %s; want refused, naming its group", leader, code, stderr)
	}
	w.Close()
	if code, stderr := r.ledgerCmd("clear", intent, "--reason", "checked"); code != 0 {
		t.Fatalf("clear once the server has stopped: exit %d, %s", code, stderr)
	}
}
