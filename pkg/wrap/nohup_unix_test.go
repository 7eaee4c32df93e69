//go:build unix

package wrap_test

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNohupStillIgnoresSIGHUP: wrap stops in order on SIGHUP (TestAgentHangingUpOrSIGTERM…),
// but one started with SIGHUP ignored (nohup) keeps ignoring it: asking for the signal would
// undo what the user asked for. The wrap under nohup answers a call after a SIGHUP.
func TestNohupStillIgnoresSIGHUP(t *testing.T) {
	t.Parallel()
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("skipped: the nohup command is not installed")
	}
	r := newRig(t)
	r.prefix = []string{nohup}
	w := r.wrap()
	r.prefix = nil
	if x := call(t, w.Session, "charge", `{"amount":1}`); x.IsError {
		t.Fatalf("before the signal: %s", x.text())
	}
	if err := syscall.Kill(w.Pid(), syscall.SIGHUP); err != nil { // nohup execs: its pid is wrap's
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a stop would have begun by now
	if x := call(t, w.Session, "charge", `{"amount":2}`); x.IsError || !strings.Contains(x.text(), "charged 2") {
		t.Fatalf("after a SIGHUP under nohup: %s\nwrap log:\n%s", x.text(), w.log.String())
	}
	if strings.Contains(w.log.String(), "stopping") {
		t.Fatalf("wrap under nohup began a stop on SIGHUP:\n%s", w.log.String())
	}
}
