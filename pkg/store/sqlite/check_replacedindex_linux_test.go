package sqlite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestCheckNamesAHolderWhoseIndexWasReplaced: a process whose ledger index (LEDGER-shm) was
// removed while it used it records nothing more (TestRemovedIndexStopsTheWriter): it must be
// restarted. Before 2026-12-06 `ledger check` said such a ledger was OK, and made a new index
// beside it, which the processes opening the ledger then shared without that one. It now
// names the process and says to restart it, whether the index is missing, replaced by a new
// one, or kept under another name (a hard link). A holder stopped (SIGSTOP) with its index in
// place holds the same locks and is named for nothing.
func TestCheckNamesAHolderWhoseIndexWasReplaced(t *testing.T) {
	for _, how := range []string{"rm", "ln"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ledger.db")
			seedLedger(t, path, 1)
			h := startHolder(t, path, "held", time.Minute, false, nil)
			pid := h.cmd.Process.Pid
			if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitState(t, pid, 'T')
			if r, err := sqlite.Check(ctx, path); err != nil || !r.OK || r.States["in_flight"] != 1 {
				t.Fatalf("ledger check with a stopped holder, its index in place: %v %+v; want it OK", err, r)
			}
			if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if how == "ln" {
				if err := os.Link(path+"-shm", filepath.Join(dir, "kept-shm")); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Remove(path + "-shm"); err != nil {
				t.Fatal(err)
			}
			// The first check finds no index at the name; the second, the one the first made.
			for i := range 2 {
				r, err := sqlite.Check(ctx, path)
				if err != nil {
					t.Fatal(err)
				}
				if r.OK || !strings.Contains(strings.Join(r.Problems, "\n"), fmt.Sprintf("process %d has the ledger open with an index", pid)) || !strings.Contains(strings.Join(r.Advice, "\n"), fmt.Sprintf("restart process %d", pid)) {
					t.Fatalf("ledger check %d with the holder's index removed: %+v; want the holder named, to restart", i+1, r)
				}
			}
			if got := h.say("commit"); !strings.HasPrefix(got, "refused ") {
				t.Fatalf("the holder whose index was removed: %q; want its commit refused (it records nothing more)", got)
			}
		})
	}
}
