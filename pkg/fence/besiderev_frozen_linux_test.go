package fence_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestClaimGivenUpIsReleasedWhileItsNoteCannotBeWritten: the spool is on a disk of its own
// that does not answer (a PostgreSQL ledger's spool in the state directory, on a local disk
// that hangs), so the note of a claim given up cannot be written; the claim lands once the
// ledger answers, and the engine releases it then, as it did before notes were written. Until
// the fix the release waited for the note: for as long as the spool's disk hung. Root.
func TestClaimGivenUpIsReleasedWhileItsNoteCannotBeWritten(t *testing.T) {
	dir, freeze := diskfull.Frozen(t)
	s := newLandedStallStore()
	defer s.open()
	spool := filepath.Join(dir, "spool")
	e := fence.New(s, fence.Config{LeaseTTL: time.Minute, SpoolDir: spool})
	thaw := freeze()
	defer thaw()
	req := fence.Request{Intent: "charge", Tool: "charge", Args: []byte(`{"n":1}`)}
	givenUp(t, e, s, req)
	s.open() // the ledger answers: the claim given up is there
	deadline := time.Now().Add(3 * time.Second)
	for {
		rec, rel := recordOf(t, s.MemoryStore, req.Intent)
		if rec == nil && len(rel) == 1 && strings.Contains(rel[0].Reason, "never sent") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 s after the claim given up landed, its spool's disk not answering: record %+v, releases %+v; want it released", rec, rel)
		}
		time.Sleep(20 * time.Millisecond)
	}
	thaw()
	thawed := time.Now()
	// The note, written once the disk answers, is removed (its claim was released): waited
	// for, so that nothing uses the file system as the test's cleanup unmounts it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		des, _ := os.ReadDir(spool)
		if len(des) == 0 && time.Since(thawed) > 300*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spool 5 s after its disk answered: %v; want it empty (its claim was released)", des)
		}
	}
	e.Close()
}
