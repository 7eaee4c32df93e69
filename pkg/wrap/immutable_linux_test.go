package wrap_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/diskfull"
)

// TestLedgerMadeImmutableUnderWrap: a real wrap's SQLite ledger file, or its write-ahead log,
// is made immutable (chattr +i) while a call runs in the server, and made writable again
// later. Writes to an immutable file fail with EPERM, root's too, through descriptors opened
// before. The file itself is written only at checkpoints, so with it immutable every call
// still runs once. With the log immutable a new call is refused, not run, and the agent is
// told which file is immutable (before 2026-12-07: "disk I/O error (778)"); the running call's
// outcome waits in the spool and it is answered; a duplicate of a recorded call replays it.
// Once the attribute is cleared the refused call runs once and the others replay.
func TestLedgerMadeImmutableUnderWrap(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("skipped: chattr is not installed")
	}
	for _, file := range []string{"ledger.db", "ledger.db-wal"} {
		t.Run(file, func(t *testing.T) {
			r := newRig(t)
			disk := diskfull.MountExt4(t)
			r.ledger = filepath.Join(disk.Dir, "ledger.db")
			target := filepath.Join(disk.Dir, file)
			// A lease of 2 s: the running call's outcome goes to the spool after that.
			w := r.wrap("--lease-secs", "2")
			first := call(t, w.Session, "charge", `{"amount":1,"order":"before"}`)
			type answer struct {
				x   result
				err error
			}
			got := make(chan answer, 1)
			slow := `{"ms":1000,"tag":"immutable"}`
			go func() {
				x, err := callE(w.Session, "slow", slow)
				got <- answer{x, err}
			}()
			waitFor(t, "the slow call to start", func() bool { return strings.Contains(w.log.String(), "slow tag=immutable started") })
			chattr(t, "+i", target)
			t.Cleanup(func() { _ = exec.Command("chattr", "-i", target).Run() })

			x := call(t, w.Session, "charge", `{"amount":1,"order":"during"}`)
			if file == "ledger.db" {
				if x.IsError {
					t.Errorf("a call with the ledger file immutable (its log is written): %s", x.text())
				}
			} else if !x.IsError || !strings.Contains(x.text(), "NOT executed") || !strings.Contains(x.text(), "immutable") || r.effectCount() > 2 {
				t.Errorf("a call with the ledger's log immutable: %s (isError %v), %d effects; want it refused, not run, the file named", x.text(), x.IsError, r.effectCount())
			}
			a := <-got
			if a.err != nil || a.x.IsError || !strings.Contains(a.x.text(), "slow done") {
				t.Fatalf("the running call: %s, %v; want its result", a.x.text(), a.err)
			}
			if again := call(t, w.Session, "charge", `{"amount":1,"order":"before"}`); !again.replayed() || again.same() != first.same() {
				t.Errorf("a duplicate of the recorded call: replayed %v, %s", again.replayed(), again.text())
			}
			chattr(t, "-i", target)
			effects := r.effectCount()
			want := effects
			if file != "ledger.db" {
				want++ // the refused call runs now
			}
			if x := call(t, w.Session, "charge", `{"amount":1,"order":"during"}`); x.IsError || r.effectCount() != want {
				t.Errorf("the second call once writable: %s; %d effects, want %d", x.text(), r.effectCount(), want)
			}
			if x := call(t, w.Session, "slow", slow); !x.replayed() || x.same() != a.x.same() || r.effectCount() != want {
				t.Errorf("the slow call's duplicate once writable: replayed %v, %s; %d effects, want %d", x.replayed(), x.text(), r.effectCount(), want)
			}
		})
	}
}

func chattr(t *testing.T, flag, path string) {
	t.Helper()
	if out, err := exec.Command("chattr", flag, path).CombinedOutput(); err != nil {
		t.Fatalf("chattr %s %s: %v: %s", flag, path, err, out)
	}
}
