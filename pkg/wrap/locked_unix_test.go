//go:build unix

package wrap_test

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/sqlitelock"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestAnswerWhileAnotherProcessHoldsTheLedgersLock: docs/wrap.md promises that a call's answer
// waits for its outcome to be in the ledger or, the ledger failing for longer than the lease,
// in its spool. Here the ledger does not fail: another process holds the SQLite file's write
// lock (a writer stopped inside its transaction) while a call runs in the child. The agent
// must be answered with the call's result (the outcome spooled), not left waiting for the
// lock; a duplicate sent by another wrap's agent while the lock is still held must not run
// the call again, and once the lock is given back it receives the recorded result. The same
// with the holder killed (kill -9) after answering, before the lock is given back. Before
// 2026-12-04 the answer waited for the call's last lease renewal, which waited for the lock
// under no deadline until the store's busy timeout (30 s, whatever the lease): a client that
// gives up sooner lost the answer.
func TestAnswerWhileAnotherProcessHoldsTheLedgersLock(t *testing.T) {
	t.Parallel()
	for _, killed := range []bool{false, true} {
		name := "holder-alive"
		if killed {
			name = "holder-killed"
		}
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			flags := []string{"--lease-secs", "1"}
			a := r.wrap(flags...)
			b := r.wrap(flags...)
			args := `{"ms":1500,"tag":"locked"}`
			got := make(chan result, 1)
			errs := make(chan error, 1)
			go func() {
				x, err := callE(a.Session, "slow", args)
				if err != nil {
					errs <- err
					return
				}
				got <- x
			}()
			waitFor(t, "the call to start", func() bool { return strings.Contains(a.log.String(), "slow tag=locked started") })
			unlock := sqlitelock.Hold(t, r.ledger)
			var first result
			select {
			case first = <-got:
			case err := <-errs:
				t.Fatalf("the call while the ledger was locked: %v; log:\n%s", err, a.log.String())
			case <-time.After(20 * time.Second):
				// The bound is the lease (1 s) and the settle after it; the store's busy
				// timeout, which the answer waited for before, is 30 s.
				t.Fatalf("no answer 20 s after a call whose outcome the locked ledger could not take (lease 1 s); log:\n%s", a.log.String())
			}
			if first.IsError || !strings.Contains(first.text(), "slow done") {
				t.Fatalf("the call while the ledger was locked: %s (isError %v); want its result; log:\n%s", first.text(), first.IsError, a.log.String())
			}
			spool := r.ledger + ".spool"
			if files, err := fence.SpoolFiles(spool); err != nil || len(files) != 1 {
				t.Fatalf("spool %s: %v, %v; want the call's outcome; log:\n%s", spool, files, err, a.log.String())
			}
			if killed {
				if err := syscall.Kill(a.Pid(), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				<-a.Done()
			}
			// b's agent sends the duplicate while the lock is still held.
			dup := make(chan result, 1)
			dupErr := make(chan error, 1)
			go func() {
				x, err := callE(b.Session, "slow", args)
				if err != nil {
					dupErr <- err
					return
				}
				dup <- x
			}()
			time.Sleep(1500 * time.Millisecond) // the duplicate meets the lock (no bound is tested)
			if n := r.effectCount(); n != 1 {
				t.Fatalf("%d executions while the ledger was locked; want 1; log b:\n%s", n, b.log.String())
			}
			unlock()
			var again result
			select {
			case again = <-dup:
			case err := <-dupErr:
				t.Fatalf("the duplicate: %v; log b:\n%s", err, b.log.String())
			case <-time.After(90 * time.Second):
				t.Fatalf("no answer to the duplicate 90 s after the lock was given back; log b:\n%s", b.log.String())
			}
			if !again.replayed() || again.same() != first.same() || r.effectCount() != 1 {
				// A refusal sent while the lock was held is safe (nothing ran); the agent's
				// retry must then receive the recorded result.
				if !again.replayed() && r.effectCount() == 1 {
					again = call(t, b.Session, "slow", args)
				}
			}
			if !again.replayed() || again.same() != first.same() || r.effectCount() != 1 {
				t.Fatalf("the duplicate after the lock was given back: replayed %v, %s (isError %v); %d executions; want the replay of the first, 1 execution; log b:\n%s",
					again.replayed(), again.text(), again.IsError, r.effectCount(), b.log.String())
			}
			c := r.wrap(flags...)
			if x := call(t, c.Session, "slow", args); !x.replayed() || x.same() != first.same() || r.effectCount() != 1 {
				t.Fatalf("a wrap started afterwards: replayed %v, %s; %d executions", x.replayed(), x.text(), r.effectCount())
			}
		})
	}
}

// TestStopWhileAnotherProcessHoldsTheLedgersLock: docs/wrap.md promises a stop bounded as MCP
// clients expect (stdin closed, SIGTERM about 2 s later, SIGKILL about 2 s after that): after
// the grace wrap stops the server and records each fenced call still inside it as unknown.
// Here another process holds the SQLite ledger's write lock, so the ledger cannot take that
// outcome; it must be in the spool before the client's SIGKILL, not waited for through the
// lease (60 s by default). Once the lock is given back, the next wrap records it and a
// duplicate is refused as unknown, not run. Before 2026-12-04 the stop waited the whole
// lease for the ledger (66 s here) and the client's SIGKILL found the spool empty.
func TestStopWhileAnotherProcessHoldsTheLedgersLock(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	rw, _ := startHung(t, r, "--grace", "1s")
	unlock := sqlitelock.Hold(t, r.ledger)
	rw.in.Close()
	time.Sleep(2 * time.Second) // the client's SIGTERM comes about 2 s after closing stdin
	if err := rw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // and its SIGKILL about 2 s after that
	if err := rw.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	exitWithin(t, rw, 20*time.Second)
	spool := r.ledger + ".spool"
	if files, err := fence.SpoolFiles(spool); err != nil || len(files) != 1 {
		t.Fatalf("spool %s when the client's SIGKILL came: %v, %v; want the hung call's outcome; stderr:\n%s", spool, files, err, rw.log.String())
	}
	unlock()
	ran := r.effectCount()
	w := r.wrap()
	x := call(t, w.Session, "slow", `{"ms":600000,"tag":"hung"}`)
	if !x.IsError || x.replayed() || !strings.Contains(x.text(), "NOT executed") || r.effectCount() != ran {
		t.Fatalf("a duplicate of the call stopped while the ledger was locked: %s (isError %v); %d executions, %d before; want refused as unknown, nothing run", x.text(), x.IsError, r.effectCount(), ran)
	}
	if got := records(t, r.openLedger().Store(), fence.StateUnknown); len(got) != 1 {
		t.Fatalf("unknown records: %+v; want the hung call's", got)
	}
}
