package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeClaimInAChildPIDNamespaceIsSeenFromTheHost: docs/serve.md says that "on this host"
// is in sight of the judge: its PID namespace and the namespaces below it. A real serve
// process in a PID namespace of its own (unshare -p, as a container sharing the ledger's
// directory) holds a claim past its lease and still runs. `ledger clear` without --force,
// run in this test's namespace (the container's host) or in the serve process's own
// (nsenter), is refused, naming the process that still runs; run in a sibling namespace
// (another container), which cannot see it, it clears the claim, as for a holder on another
// host. Before 2026-12-07 the host could not see it either, and cleared the claim of a serve
// process that still ran.
func TestServeClaimInAChildPIDNamespaceIsSeenFromTheHost(t *testing.T) {
	t.Parallel()
	unshare, err1 := exec.LookPath("unshare")
	nsenter, err2 := exec.LookPath("nsenter")
	if os.Getuid() != 0 || err1 != nil || err2 != nil {
		t.Skip("needs root, unshare and nsenter")
	}
	bin := effectfence(t)
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	cmd := exec.Command(unshare, "-p", "-f", "--mount-proc", bin, "serve", "--ledger", ledger, "--lease-secs", "1")
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "NO_COLOR=1")
	cmd.WaitDelay = 5 * time.Second
	s := startServeCmd(t, cmd)
	p := s.prepare(`{"intent":"charge:o-ns","tool":"charge_card","args":{"amount":4900}}`)
	if p.Ticket == nil {
		t.Fatalf("prepare: %+v", p)
	}
	kids, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid) + "/children")
	serve, err2 := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil || err2 != nil {
		t.Fatalf("serve under unshare: children %q: %v %v", kids, err, err2)
	}
	// Killing unshare leaves its child running: the namespace ends with serve, its init.
	t.Cleanup(func() { _ = syscall.Kill(serve, syscall.SIGKILL) })
	for !time.Now().After(p.Ticket.LeaseUntil.Add(100 * time.Millisecond)) {
		time.Sleep(50 * time.Millisecond)
	}
	clear := []string{"ledger", "clear", "charge:o-ns", "--reason", "the agent is gone", "--ledger", ledger}
	env := append(os.Environ(), "GORACE=atexit_sleep_ms=0", "NO_COLOR=1")
	refused := func(where string, cmd *exec.Cmd) string {
		t.Helper()
		cmd.Env = env
		got, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil {
			t.Fatalf("clear %s did not run: %v", where, err)
		}
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(got), "still runs on this host") {
			t.Fatalf("clear %s: exit %d (%v)\n%s\nwant exit 1: its holder still runs", where, code, err, got)
		}
		return string(got)
	}
	// On the host, the refusal names the pid the host knows the serve process by (in the owner
	// string it is 1, the container's init).
	here := refused("in this test's PID namespace, the serve process's parent", exec.Command(bin, clear...))
	if want := "(pid " + strconv.Itoa(serve) + " here"; !strings.Contains(here, want) {
		t.Errorf("the refusal on the host does not say %q:\n%s", want, here)
	}
	refused("in the serve process's PID namespace", exec.Command(nsenter, append([]string{"-t", strconv.Itoa(serve), "-p", "-m", bin}, clear...)...))

	sibling := exec.Command(unshare, append([]string{"-p", "-f", "--mount-proc", bin}, clear...)...)
	sibling.Env = env
	got, err := sibling.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "cleared charge:o-ns") {
		t.Fatalf("clear from a sibling PID namespace: %v\n%s\nwant it cleared: the holder is out of sight (docs/serve.md)", err, got)
	}
}
