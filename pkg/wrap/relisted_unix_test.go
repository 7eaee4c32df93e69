//go:build unix

package wrap_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// TestRestartedChildIsJudgedByItsOwnListing: a listing is of one life of the server. The
// child (mcptest's "relisted" mode, which declares tools.listChanged false and never sends
// list_changed) lists balance read-only; the agent lists, and balance passes through. The
// child is killed (kill -9) and the next lists the same tools: balance passes through, and the
// agent is told nothing. Then it is killed again, and the one wrap starts for the next call
// lists balance as a tool that may write: two identical calls of it run once, the second
// replayed, and the agent is told notifications/tools/list_changed before the first is
// answered. Then the child exits on its own (die), and the next lists balance read-only again:
// its calls pass through again (each runs), and the agent is told again. Before 2026-12-07 the
// first life's listing judged the second life's calls: balance passed through unfenced and ran
// twice, and the agent was told nothing.
func TestRestartedChildIsJudgedByItsOwnListing(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	r.mode = "relisted"
	w := r.wrap()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := w.ListTools(ctx, ""); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if x := call(t, w.Session, "balance", `{}`); x.IsError || x.replayed() {
			t.Fatalf("balance, read-only, in the first life: %+v", x)
		}
	}
	if n := r.effectsOf("balance"); n != 2 {
		t.Fatalf("balance, read-only, ran %d times, want 2 (passed through)", n)
	}
	drainNotes(w)

	// A restart that lists the same tools, byte for byte, passes balance through and tells
	// the agent nothing: any list_changed wrap sent would have reached it before the answer.
	killChild(t, w)
	if x := callSent(t, w, "balance", `{}`); x.IsError || x.replayed() {
		t.Fatalf("balance, read-only, after a restart that changed nothing: %+v", x)
	}
	if n := r.effectsOf("balance"); n != 3 {
		t.Fatalf("balance ran %d times, want 3 (passed through)", n)
	}
	for len(w.notes) > 0 {
		if n := <-w.notes; n == "notifications/tools/list_changed" {
			t.Fatalf("the agent was told list_changed after a restart whose listing is the same; wrap log:\n%s", w.log.String())
		}
	}

	marker := r.effects + mcptest.RelistedSuffix
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	killChild(t, w)
	first, second := callSent(t, w, "balance", `{}`), callSent(t, w, "balance", `{}`)
	if n := r.effectsOf("balance"); n != 4 {
		t.Fatalf("balance, which the restarted child lists as a tool that may write, ran %d more times, want 1; wrap log:\n%s", n-3, w.log.String())
	}
	if first.IsError || first.replayed() || second.IsError || !second.replayed() {
		t.Fatalf("balance in the second life: %+v, then %+v; want it run, then replayed", first, second)
	}
	wantListChanged(t, w)

	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	pid := childOf(t, w)
	if x, err := callE(w.Session, "die", `{"tag":"relisted"}`); err == nil && !x.IsError {
		t.Fatalf("die answered as done: %+v", x)
	}
	waitFor(t, "the child to exit", func() bool { return !alive(pid) })
	drainNotes(w)
	for range 2 {
		if x := callSent(t, w, "balance", `{}`); x.IsError || x.replayed() {
			t.Fatalf("balance, read-only again in the third life: %+v; wrap log:\n%s", x, w.log.String())
		}
	}
	wantListChanged(t, w)
	if n := r.effectsOf("balance"); n != 6 {
		t.Fatalf("balance, read-only again, ran %d times in all, want 6 (the third life's calls passed through)", n)
	}
}

// callSent calls tool, again while wrap answers with the error of a child that died: wrap may
// not have seen its child die yet, and a call passed through to it fails there (unsent, or
// written to its pipe and failed when wrap read its exit), having run nowhere.
func callSent(t *testing.T, w *wrapProc, tool, args string) result {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		x, err := callE(w.Session, tool, args)
		if err == nil {
			return x
		}
		if !strings.Contains(err.Error(), "request not sent") && !strings.Contains(err.Error(), "exited: signal: killed") || time.Now().After(deadline) {
			t.Fatalf("%v; wrap log:\n%s", err, w.log.String())
		}
	}
}

// childOf is the pid of wrap's one live child.
func childOf(t *testing.T, w *wrapProc) int {
	t.Helper()
	var kids []int
	waitFor(t, "wrap's one child", func() bool { kids = childPids(w.Pid()); return len(kids) == 1 })
	return kids[0]
}

// killChild kills wrap's child with SIGKILL and waits until wrap has reaped it.
func killChild(t *testing.T, w *wrapProc) {
	t.Helper()
	pid := childOf(t, w)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed child to be gone", func() bool { return !alive(pid) })
}

// drainNotes drops the notifications the agent has received so far.
func drainNotes(w *wrapProc) {
	for {
		select {
		case <-w.notes:
		default:
			return
		}
	}
}

// wantListChanged fails unless the agent has been told notifications/tools/list_changed.
// mcpstdio hands a response over only after the notifications written before it, so one sent
// before the answer the test has is already there; the bound is for a loaded machine only.
func wantListChanged(t *testing.T, w *wrapProc) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case n := <-w.notes:
			if n == "notifications/tools/list_changed" {
				return
			}
		case <-deadline:
			t.Fatalf("the agent was not told notifications/tools/list_changed; wrap log:\n%s", w.log.String())
		}
	}
}
