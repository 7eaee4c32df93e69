//go:build unix

package wrap_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// docs/policy.md: on_unknown's timeout is the "bound on one delivery". A hook command that
// runs its work in a process of its own (a shell running curl, a script starting a notifier)
// and does not answer in time is stopped with everything it started, as wrap stops its MCP
// server: before, only the direct child was killed, and what it started ran on unbounded, one
// more for every retry, past wrap's own exit.
func TestOnUnknownHookTimeoutStopsWhatTheCommandStarted(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	pids := filepath.Join(r.dir, "pids")
	hook := &wrap.Hook{Command: []string{"sh", "-c", `sleep 600 & echo $! >> "$0"; wait`, pids}, Timeout: time.Second, Retries: wrap.NoHookRetries}
	x, _ := r.inproc(wrap.Options{OnUnknown: hook}, initNoElicit, nil)
	unknownCall(t, x)
	waitFor(t, "the hook's delivery to time out", func() bool { return strings.Contains(x.log.String(), "no answer within") })
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatalf("pids %q: %v", b, err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the hook's delivery timed out, but the process it started (pid %d) still runs; log:\n%s", pid, x.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	x.close()
}

// A hook command that succeeds (exit 0) but leaves a process behind holding its stderr (a
// notifier started in the background) delivered its event: it is not tried again. Before, the
// wait for that stderr to end (a second) failed the delivery, and each retry delivered the
// event once more: four pages for one unknown outcome.
func TestOnUnknownHookThatSucceedsLeavingAProcessIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events.jsonl")
	hook := &wrap.Hook{Command: []string{"sh", "-c", `cat >> "$0"; echo >> "$0"; sleep 3 &`, events}}
	x, _ := r.inproc(wrap.Options{OnUnknown: hook}, initNoElicit, nil)
	unknownCall(t, x)
	waitFor(t, "the event", func() bool { _, err := os.Stat(events); return err == nil })
	time.Sleep(3 * time.Second) // a retry would come within 1.25 s
	x.close()
	b, _ := os.ReadFile(events)
	if n := strings.Count(strings.TrimSpace(string(b)), "\n") + 1; n != 1 {
		t.Fatalf("the event was delivered %d times, want once; log:\n%s", n, x.log.String())
	}
}
