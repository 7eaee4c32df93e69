package fence_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestNoteOfAClaimThatDidNotLandDoesNotFenceAReRunSafeClaim: a note of a claim given up (which
// says its call was never sent) waits in the spool while its writer runs. Meanwhile another
// process claims the intent, re-run safe, and dies: the next process takes that claim over, as
// it would with no note there. The note is no outcome of that claim (nor of any that ran), so
// it is no reason to fence it; until the fix the lease rules read any file of the intent in
// the spool as "an outcome of the intent waits" and made the claim unknown, and the retry was
// refused prior_failure until an operator cleared it.
func TestNoteOfAClaimThatDidNotLandDoesNotFenceAReRunSafeClaim(t *testing.T) {
	s := newLandedStallStore()
	s.drop = true
	defer s.open()
	spool := t.TempDir()
	var thirdGone atomic.Bool
	live := func(owner string) fence.Liveness {
		if owner == "third" && thirdGone.Load() {
			return fence.Dead
		}
		return fence.Alive
	}
	req := fence.Request{Intent: "charge", Tool: "charge", Args: []byte(`{"n":1}`), RerunSafe: true}
	first := fence.New(s, fence.Config{Owner: "first", Liveness: live, SpoolDir: spool})
	givenUp(t, first, s, req)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if notes, _ := fence.SpoolFiles(spool); len(notes) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no note of the claim given up in the spool after 10 s")
		}
	}

	third := fence.New(s, fence.Config{Owner: "third", Liveness: live, SpoolDir: spool})
	adm, err := third.Prepare(context.Background(), req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("a claim of the intent through a third process: %+v, %v; want it admitted", adm, err)
	}
	thirdGone.Store(true) // dies with its re-run-safe claim in flight

	next := fence.New(s, fence.Config{Owner: "next", Liveness: live, SpoolDir: spool})
	defer next.Close()
	if _, err := next.Recover(context.Background()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	adm, err = next.Prepare(context.Background(), req)
	if err != nil || !adm.Fresh() {
		rec, _ := recordOf(t, s.MemoryStore, req.Intent)
		t.Fatalf("the retry through the next process: %+v, %v (record %+v); want the dead holder's re-run-safe claim taken over", adm, err, rec)
	}
}
