//go:build unix

package wrap_test

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// Shutdown as MCP clients do it (issue 11 item 8): they close stdin, send SIGTERM about 2 s
// later and SIGKILL about 2 s after that. These tests run the real binary over a real child
// that is stuck in a call.

const hungCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"ms":600000,"tag":"hung"}}}`

// startHung starts a wrap with flags, initializes it, sends a call that never ends and waits
// until the ledger holds its claim. It returns the wrap and its child's pid.
func startHung(t *testing.T, r *rig, flags ...string) (*rawWrap, int) {
	t.Helper()
	rw := r.rawWrap(flags...)
	if got := rw.roundTrip(t, initLine); !strings.Contains(got, `"result"`) {
		t.Fatalf("initialize: %s", got)
	}
	if _, err := io.WriteString(rw.in, hungCall+"\n"); err != nil {
		t.Fatal(err)
	}
	led := r.openLedger()
	waitFor(t, "the hung call's claim in the ledger", func() bool { return len(records(t, led.Store(), fence.StateInFlight)) == 1 })
	kids := childPids(rw.cmd.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("wrap has %d children, want its MCP server: %v", len(kids), kids)
	}
	return rw, kids[0]
}

func records(t *testing.T, st fence.Store, states ...fence.State) []fence.Record {
	t.Helper()
	var out []fence.Record
	err := st.View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{States: states}, func(r *fence.Record) bool { out = append(out, *r); return true })
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// exitWithin waits for the wrap to exit and returns its exit code; it fails the test if the
// wrap is still running after d.
func exitWithin(t *testing.T, rw *rawWrap, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- rw.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !asExit(err, &ee) {
			t.Fatal(err)
		}
		return rw.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		_ = rw.cmd.Process.Kill()
		<-done
		t.Fatalf("wrap did not exit within %s; stderr:\n%s", d, rw.log.String())
		return -1
	}
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// TestStopWithAHungCall: stdin closed, then SIGTERM, with a call stuck in the child. Wrap says
// what it waits for, exits after its grace, and the stuck call is unknown in the ledger.
func TestStopWithAHungCall(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	rw, child := startHung(t, r, "--grace", "1s")
	began := time.Now()
	rw.in.Close()
	time.Sleep(100 * time.Millisecond) // clients send SIGTERM after closing stdin
	if err := rw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := exitWithin(t, rw, 20*time.Second)
	took := time.Since(began)
	log := rw.log.String()
	for _, want := range []string{`waiting up to 1s for 1 call: tools/call "slow"`, "grace of 1s is over", "recorded as unknown"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	if code != 0 {
		t.Errorf("exit code %d after an orderly stop", code)
	}
	t.Logf("stopped %s after stdin closed (grace 1s)", took.Round(10*time.Millisecond))
	unknown := records(t, r.openLedger().Store(), fence.StateUnknown)
	if len(unknown) != 1 || unknown[0].Tool != "slow" {
		t.Fatalf("the hung call is not unknown in the ledger: %+v; stderr:\n%s", unknown, log)
	}
	if left := records(t, r.openLedger().Store(), fence.StateInFlight); len(left) != 0 {
		t.Fatalf("claims left in flight: %+v", left)
	}
	if alive(child) {
		t.Fatalf("the MCP server (pid %d) outlived wrap", child)
	}
}

// TestSecondSignalExitsAtOnce: a long grace is cut short by a second SIGINT, and the child goes
// with wrap.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	rw, child := startHung(t, r, "--grace", "10m")
	if err := rw.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first signal's log line", func() bool { return strings.Contains(rw.log.String(), "waiting up to 10m0s for 1 call") })
	if err := rw.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitWithin(t, rw, 20*time.Second); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit code %d, want %d", code, 128+int(syscall.SIGINT))
	}
	if !strings.Contains(rw.log.String(), "again: exiting now") {
		t.Errorf("no log line for the second signal:\n%s", rw.log.String())
	}
	waitFor(t, fmt.Sprintf("the MCP server (pid %d) to end with wrap", child), func() bool { return !alive(child) })
}

// TestChildDiesWithKilledWrap: after SIGKILL of wrap, its MCP server is gone too (Linux's
// parent-death signal); it is not left to PID 1.
func TestChildDiesWithKilledWrap(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	rw, child := startHung(t, r)
	if err := rw.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exitWithin(t, rw, 20*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for alive(child) {
		if time.Now().After(deadline) {
			ppid, _ := procParent(child)
			t.Fatalf("the MCP server (pid %d) outlived the killed wrap by 5 s; its parent is now %d", child, ppid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStopRecordsTheCutCallInTheLedger: a stop whose grace ends with a call in the server
// records that call's unknown outcome in the ledger, which is idle, not through the spool.
// Every such stop went to the spool, logging "the ledger did not take the outcome (context
// canceled)", which sent an operator looking for a ledger fault there was none of.
func TestStopRecordsTheCutCallInTheLedger(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	rw, _ := startHung(t, r, "--grace", "1s")
	rw.in.Close()
	if code := exitWithin(t, rw, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after an orderly stop", code)
	}
	log := rw.log.String()
	if strings.Contains(log, "did not take the outcome") || strings.Contains(log, "context canceled") {
		t.Fatalf("the stop's outcome went to the spool with the ledger idle:\n%s", log)
	}
	if unknown := records(t, r.openLedger().Store(), fence.StateUnknown); len(unknown) != 1 {
		t.Fatalf("the cut call is not unknown in the ledger: %+v; stderr:\n%s", unknown, log)
	}
}
