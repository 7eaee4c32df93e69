package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestWritingOpensOnAFullDiskLeaveNothingBeside: a ledger that no process has open, closed
// cleanly (nothing beside it but the writers' queue file), on a disk then filled. Every open
// that writes fails there for want of room, and says so: sweep, clear, resolve, a wrap
// starting. It must take back what it made beside the ledger, and only that: before, each left
// an empty log and an index cut to 3 bytes, which the next process took as its own (and which
// check then had to read past). The ledger opens as before once there is room.
func TestWritingOpensOnAFullDiskLeaveNothingBeside(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	disk := diskfull.Mount(t, 4<<20)
	path := filepath.Join(disk, "ledger.db")
	fenceIntents(t, path, "charge:order-7")
	diskfull.Fill(t, disk)
	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}
	before := filesIn(t, disk)
	for _, args := range [][]string{
		{"ledger", "sweep", "--ledger", path},
		{"ledger", "clear", "charge:order-7", "--reason", "checked", "--ledger", path},
		{"ledger", "resolve", "charge:order-7", "--did-not-happen", "--reason", "checked", "--ledger", path},
	} {
		r := runBinary(t, env, "", args...)
		if r.code != exitError || !strings.Contains(r.stderr, "no room left") {
			t.Errorf("%s on a full disk: exit %d; want 1, saying there is no room\n%s%s", strings.Join(args[:2], " "), r.code, r.stdout, r.stderr)
		}
		if after := filesIn(t, disk); !slices.Equal(before, after) {
			t.Errorf("%s on a full disk left beside the ledger:\nbefore %q\nafter  %q", strings.Join(args[:2], " "), before, after)
		}
	}
	wrap := exec.Command(bin, "wrap", "--ledger", path, "--", bin, "demo-server")
	wrap.Dir = t.TempDir()
	out, err := wrap.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no room left") {
		t.Errorf("wrap starting on a full disk: %v; want it to fail, saying there is no room\n%s", err, out)
	}
	if after := filesIn(t, disk); !slices.Equal(before, after) {
		t.Errorf("wrap starting on a full disk left beside the ledger:\nbefore %q\nafter  %q", before, after)
	}
}

// TestWritingOpenOnAFullDiskKeepsAKilledHoldersClaim: what a failed open takes back is only
// what it made. A real wrap killed mid-call leaves its claim in the log, and the disk fills:
// sweep fails there, and whatever SQLite's own close did with that log (it may copy it into the
// file, which needs no room, and remove it), the claim is not lost: with room again, ls shows
// it, marked unknown by that open.
func TestWritingOpenOnAFullDiskKeepsAKilledHoldersClaim(t *testing.T) {
	t.Parallel()
	fd := killedOnAFullDisk(t, nil)
	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}
	if r := runBinary(t, env, "", "ledger", "sweep", "--ledger", fd.ledger); r.code != exitError || !strings.Contains(r.stderr, "no room left") {
		t.Errorf("ledger sweep on a full disk: exit %d; want 1, saying there is no room\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := os.Remove(fd.filler); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, env, "", "ledger", "ls", "--state", "unknown", "--ledger", fd.ledger)
	if r.code != 0 || !strings.Contains(r.stdout, fd.claim.Intent) {
		t.Errorf("ledger ls with room again: exit %d; want the killed call's claim, unknown\n%s%s", r.code, r.stdout, r.stderr)
	}
}
