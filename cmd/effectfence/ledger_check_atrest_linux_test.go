package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerCheckOfAKilledHoldersLogWritesNothing: docs/ledger.md, `ledger check` changes
// nothing, beside the ledger neither. A real wrap killed mid-call leaves its claim in the log
// and the log's index beside the ledger, on a disk then filled, and no process has the ledger
// open. check must read the claim from the log (counted unknown, as the next open will mark
// it) and leave the file, the log and the index as they were: on the full disk; with the
// index cut to 3 bytes, as an open that failed for want of room leaves it; and with room
// again. Before, check read the log through SQLite's recovery, which cuts the index and
// rebuilds it (its bytes changed each time), and with the index cut on a full disk it could
// not read the ledger at all ("cannot be read here now", exit 1).
func TestLedgerCheckOfAKilledHoldersLogWritesNothing(t *testing.T) {
	t.Parallel()
	fd := killedOnAFullDisk(t, nil)
	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}
	check := func(when string) {
		t.Helper()
		before := filesIn(t, fd.disk)
		r := runBinary(t, env, "", "ledger", "check", "--ledger", fd.ledger)
		if r.code != 0 || !strings.Contains(r.stdout, "done=1 unknown=1") || !strings.Contains(r.stdout, fd.claim.Intent) {
			t.Errorf("ledger check %s: exit %d; want 0, the killed call's claim read from the log and counted unknown\n%s%s", when, r.code, r.stdout, r.stderr)
		}
		if after := filesIn(t, fd.disk); !slices.Equal(before, after) {
			t.Errorf("ledger check %s changed what is beside the ledger:\nbefore %q\nafter  %q", when, before, after)
		}
	}
	check("on a full disk")

	if err := os.Truncate(fd.ledger+"-shm", 3); err != nil {
		t.Fatal(err)
	}
	more := diskfull.Fill(t, fd.disk) // the room the index's pages took
	check("on a full disk, the index cut to 3 bytes")

	for _, f := range []string{fd.filler, more} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	check("with room again, the index cut to 3 bytes")
}
