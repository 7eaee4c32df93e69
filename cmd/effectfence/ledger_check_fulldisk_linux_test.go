package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerCheckOnAFullDiskIsNoDamage: a ledger on a file system that filled up. A process
// opening it to write (here `ledger sweep`, as a wrap restarting would) fails, saying the disk
// is full (it left a log and an index beside it, the index cut short for want of room, until
// it took them back: TestWritingOpensOnAFullDiskLeaveNothingBeside). `ledger check`, the way
// out every refusal names, must not call the ledger damaged. Before
// 2026-12-07 it read SQLite's "disk I/O error" as damage to the file and advised salvaging it
// with .recover and moving it aside for a new ledger, which replays nothing the old one
// recorded; then it said the file system was full and the ledger not damaged (exit 1); now,
// no process having the ledger open, it reads the file and the log's committed frames itself,
// writing nothing, and reports the ledger as it is (readFrozen). With room made again, the
// fenced intent is all there.
func TestLedgerCheckOnAFullDiskIsNoDamage(t *testing.T) {
	t.Parallel()
	disk := diskfull.Mount(t, 4<<20)
	path := filepath.Join(disk, "ledger.db")
	fenceIntents(t, path, "charge:order-7")
	filler := diskfull.Fill(t, disk)
	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}

	r := runBinary(t, env, "", "ledger", "sweep", "--ledger", path)
	if r.code != exitError || !strings.Contains(r.stderr, "no room left") {
		t.Fatalf("ledger sweep on a full disk: exit %d; want 1, saying the disk is full\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, env, "", "ledger", "check", "--ledger", path)
	if r.code != 0 || !strings.Contains(r.stdout, ": OK") || !strings.Contains(r.stdout, "unknown=1") {
		t.Errorf("ledger check on a full disk: exit %d; want 0, the ledger read as it is, its fenced intent counted\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, wrong := range []string{"move it aside", ".recover", "cannot read the file", "a new ledger is created"} {
		if strings.Contains(r.stdout, wrong) {
			t.Errorf("ledger check on a full disk reads it as damage (%q):\n%s", wrong, r.stdout)
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if r = runBinary(t, env, "", "ledger", "check", "--ledger", path); r.code != 0 || !strings.Contains(r.stdout, ": OK") {
		t.Errorf("ledger check with room again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = runBinary(t, env, "", "ledger", "ls", "--state", "fenced", "--ledger", path); r.code != 0 || !strings.Contains(r.stdout, "charge:order-7") {
		t.Errorf("ledger ls with room again: exit %d; want the fenced intent\n%s%s", r.code, r.stdout, r.stderr)
	}
}
