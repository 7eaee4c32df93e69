//go:build unix

package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// The tests here stop or fail the real child's tools/list (mcptest's "relisted" mode and its
// files ListStopsSuffix and ListFailsSuffix) after a fenced charge has run once, and check
// what a duplicate of that charge and a new charge get while the server's tools cannot be
// listed: the duplicate is replayed, the new charge is refused tools_unknown, naming why, and
// neither runs. The policy gives charge and balance a wait of 1s, and every other tool 10
// minutes (defaults, standing for --wait): a call held by the listing past its own wait is not
// answered within the test's minute.

// listWaitRig is a wrap of a "relisted" child with charge's wait 1s in its policy, and one
// charge run through it.
func listWaitRig(t *testing.T) (*rig, *wrapProc) {
	t.Helper()
	r, w := relistedWrap(t, "  charge:\n    wait: 1s\n  balance:\n    wait: 1s\n")
	if x := call(t, w.Session, "charge", `{"amount":1}`); x.IsError || x.replayed() {
		t.Fatalf("the first charge: %+v", x)
	}
	if n := r.effectsOf("charge"); n != 1 {
		t.Fatalf("charge ran %d times, want 1", n)
	}
	return r, w
}

// relistedWrap is a wrap of a "relisted" child whose policy gives every tool a wait of 10
// minutes and says tools (entries under tools:, indented two spaces).
func relistedWrap(t *testing.T, tools string) (*rig, *wrapProc) {
	t.Helper()
	needProc(t)
	r := newRig(t)
	r.mode = "relisted"
	// --wait would win over the entries' waits (flags win over the policy file): defaults'
	// stands for it.
	path := writePolicy(t, r, "version: 1\ndefaults:\n  wait: 10m\ntools:\n"+tools)
	return r, r.wrap("--policy", path)
}

// callWithin is callE bounded by a minute: a call wrap holds longer fails the test. As
// callSent, it calls again while wrap answers with the error of a child that died.
func callWithin(t *testing.T, w *wrapProc, tool, args string) result {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		raw, err := w.CallTool(ctx, tool, json.RawMessage(args))
		cancel()
		if err != nil && (strings.Contains(err.Error(), "request not sent") || strings.Contains(err.Error(), "exited: signal: killed")) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("%s %s: %v (not answered within a minute); wrap log:\n%s", tool, args, err, w.log.String())
		}
		var x result
		if err := json.Unmarshal(raw, &x); err != nil {
			t.Fatal(err)
		}
		return x
	}
}

// marker creates the file of the "relisted" mode named by suffix, and returns its removal.
func marker(t *testing.T, r *rig, suffix string) func() {
	t.Helper()
	path := r.effects + suffix
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

// stoppedProc reports whether process pid is stopped (state T in /proc).
func stoppedProc(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'T'
}

// unlisted waits until balance, read-only, is refused tools_unknown (its text holding why):
// wrap has seen its child die and lists the next, and cannot. Until then balance may pass
// through to the killed child.
func unlisted(t *testing.T, w *wrapProc, why string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		x := callWithin(t, w, "balance", `{}`)
		if string(x.Meta["effectfence/code"]) == `"tools_unknown"` {
			if !strings.Contains(x.text(), why) {
				t.Fatalf("balance refused tools_unknown: %q, want it to say %q", x.text(), why)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("balance after the child was killed: %+v, want refused tools_unknown; wrap log:\n%s", x, w.log.String())
		}
	}
}

// wantDuplicateReplayed checks that a duplicate of the first charge is replayed and a new
// charge refused tools_unknown, its text holding why, with charge run once in all.
func wantDuplicateReplayed(t *testing.T, r *rig, w *wrapProc, why string) {
	t.Helper()
	if x := callWithin(t, w, "charge", `{"amount":1}`); x.IsError || !x.replayed() {
		t.Fatalf("a duplicate of the charge that ran, the server's tools not listed: %q %s, want it replayed; wrap log:\n%s", x.text(), x.Meta["effectfence/code"], w.log.String())
	}
	x := callWithin(t, w, "charge", `{"amount":2}`)
	if !x.IsError || string(x.Meta["effectfence/code"]) != `"tools_unknown"` || !strings.Contains(x.text(), "NOT sent") || !strings.Contains(x.text(), why) {
		t.Fatalf("a new charge, the server's tools not listed: %q %s, want refused tools_unknown saying %q", x.text(), x.Meta["effectfence/code"], why)
	}
	if n := r.effectsOf("charge"); n != 1 {
		t.Fatalf("charge ran %d times, want 1", n)
	}
}

// TestStoppedListingOfARestartedServerHoldsACallOnlyItsWait: the child is killed (kill -9)
// and the one wrap starts for the next call stops itself (SIGSTOP) on tools/list. A duplicate
// of the charge that ran is replayed, and a new charge refused tools_unknown, each within
// about charge's wait of 1s. Once the child is continued, a new charge runs. Before
// 2026-12-07 each call waited for the listing up to --wait, whatever the tool's wait (here
// 10 minutes: not answered within the test's minute), and the duplicate, had the listing
// failed, was refused tools_unknown.
func TestStoppedListingOfARestartedServerHoldsACallOnlyItsWait(t *testing.T) {
	t.Parallel()
	r, w := listWaitRig(t)
	unstop := marker(t, r, mcptest.ListStopsSuffix)
	killChild(t, w)
	unlisted(t, w, "within 1s")
	wantDuplicateReplayed(t, r, w, "within 1s")
	pid := childOf(t, w)
	defer syscall.Kill(pid, syscall.SIGCONT)
	waitFor(t, "the new child to stop on tools/list", func() bool { return stoppedProc(pid) })
	unstop()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if x := callWithin(t, w, "charge", `{"amount":2}`); x.IsError || x.replayed() {
		t.Fatalf("a new charge once the server was continued: %+v; wrap log:\n%s", x, w.log.String())
	}
	if n := r.effectsOf("charge"); n != 2 {
		t.Fatalf("charge ran %d times, want 2", n)
	}
}

// TestStoppedRefreshAfterListChangedHoldsACallOnlyItsWait: the child says its tools changed
// (add_tool: notifications/tools/list_changed) and stops itself (SIGSTOP) on the tools/list of
// wrap's refresh. A duplicate of the charge that ran is replayed, and a new charge refused
// tools_unknown, naming list_changed, each within about charge's wait of 1s. Once the child
// is continued, a new charge runs. Before 2026-12-07 each call waited for the refresh up to
// --wait, whatever the tool's wait (here 10 minutes: not answered within the test's minute),
// and then was judged by the listing of before the change.
func TestStoppedRefreshAfterListChangedHoldsACallOnlyItsWait(t *testing.T) {
	t.Parallel()
	r, w := listWaitRig(t)
	pid := childOf(t, w)
	defer syscall.Kill(pid, syscall.SIGCONT)
	unstop := marker(t, r, mcptest.ListStopsSuffix)
	if x := call(t, w.Session, "add_tool", `{}`); x.IsError {
		t.Fatalf("add_tool: %+v", x)
	}
	waitFor(t, "the child to stop on the refresh's tools/list", func() bool { return stoppedProc(pid) })
	wantDuplicateReplayed(t, r, w, "within 1s") // the refresh's, or, once it gave up, the listing's
	unstop()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if x := callWithin(t, w, "charge", `{"amount":2}`); x.IsError || x.replayed() {
		t.Fatalf("a new charge once the server was continued: %+v; wrap log:\n%s", x, w.log.String())
	}
	if n := r.effectsOf("charge"); n != 2 {
		t.Fatalf("charge ran %d times, want 2", n)
	}
}

// TestDuplicateIsReplayedWhenTheNewLifesListingFails: the child is killed (kill -9) and the
// one wrap starts for the next call answers tools/list with an error. A duplicate of the
// charge that ran needs no listing: it is replayed. A new charge is refused tools_unknown,
// NOT sent (docs/wrap.md). Once the listing answers again, a new charge runs. Before
// 2026-12-07 the duplicate was refused tools_unknown too, though its result was recorded.
func TestDuplicateIsReplayedWhenTheNewLifesListingFails(t *testing.T) {
	t.Parallel()
	r, w := listWaitRig(t)
	unfail := marker(t, r, mcptest.ListFailsSuffix)
	killChild(t, w)
	unlisted(t, w, "tools/list fails as asked")
	wantDuplicateReplayed(t, r, w, "tools/list fails as asked")
	unfail()
	if x := callWithin(t, w, "charge", `{"amount":2}`); x.IsError || x.replayed() {
		t.Fatalf("a new charge once the listing answers: %+v; wrap log:\n%s", x, w.log.String())
	}
	if n := r.effectsOf("charge"); n != 2 {
		t.Fatalf("charge ran %d times, want 2", n)
	}
}

// TestRealServerStoppedAsItRestartsHoldsACallOnlyItsWait: the real server-memory, started by a
// shell that stops itself (SIGSTOP) before it runs the server while a file exists, so the
// start wrap makes after the server is killed (kill -9) hangs in the stopped process. The
// policy gives create_entities and read_graph a wait of 1s, every other tool 10 minutes
// (defaults, standing for --wait). read_graph, read-only, is refused tools_unknown, a
// duplicate of the create_entities that ran is replayed, and a new one refused tools_unknown,
// NOT sent, each within about its wait. Once the shell is continued the server starts and the
// new create_entities runs. Before 2026-12-07 read_graph waited for the start up to the 10
// minutes: not answered within the test's minute.
func TestRealServerStoppedAsItRestartsHoldsACallOnlyItsWait(t *testing.T) {
	t.Parallel()
	needProc(t)
	bin := peer(t, "mcp-server-memory")
	r := newRig(t)
	stop := r.dir + "/stop"
	r.childCmdOverride = []string{"/bin/sh", "-c", `if [ -e "$1" ]; then kill -STOP $$; fi; exec "$0"`, bin, stop}
	path := writePolicy(t, r, "version: 1\ndefaults:\n  wait: 10m\ntools:\n  create_entities:\n    wait: 1s\n  read_graph:\n    wait: 1s\n")
	w := r.wrap("--policy", path)
	const a = `{"entities":[{"name":"a","entityType":"t","observations":["o"]}]}`
	const b = `{"entities":[{"name":"b","entityType":"t","observations":["o"]}]}`
	if x := callWithin(t, w, "create_entities", a); x.IsError || x.replayed() {
		t.Fatalf("create_entities: %q", x.text())
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	killChild(t, w)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		x := callWithin(t, w, "read_graph", `{}`)
		if string(x.Meta["effectfence/code"]) == `"tools_unknown"` && strings.Contains(x.text(), "within 1s") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read_graph after the server was killed: %q, want refused tools_unknown; wrap log:\n%s", x.text(), w.log.String())
		}
	}
	pid := childOf(t, w)
	defer syscall.Kill(pid, syscall.SIGCONT)
	waitFor(t, "the shell starting the server to stop", func() bool { return stoppedProc(pid) })
	if x := callWithin(t, w, "create_entities", a); x.IsError || !x.replayed() {
		t.Fatalf("a duplicate of the create_entities that ran, the server stopped as it starts: %q %s, want it replayed", x.text(), x.Meta["effectfence/code"])
	}
	if x := callWithin(t, w, "create_entities", b); !x.IsError || string(x.Meta["effectfence/code"]) != `"tools_unknown"` || !strings.Contains(x.text(), "NOT sent") {
		t.Fatalf("a new create_entities, the server stopped as it starts: %q %s, want refused tools_unknown", x.text(), x.Meta["effectfence/code"])
	}
	if err := os.Remove(stop); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	x := callWithin(t, w, "create_entities", b)
	for deadline := time.Now().Add(30 * time.Second); string(x.Meta["effectfence/code"]) == `"tools_unknown"` && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		x = callWithin(t, w, "create_entities", b) // the server may take more than 1s to start once continued
	}
	if x.IsError || x.replayed() || !strings.Contains(x.text(), `"b"`) {
		t.Fatalf("a new create_entities once the server was continued: %q; wrap log:\n%s", x.text(), w.log.String())
	}
}

// TestFailedRefreshAfterListChangedLeavesNoOldListing: the child (mcptest's "relisted" mode)
// lists balance read-only, then says its tools changed (add_tool: balance may write now, and
// notifications/tools/list_changed), and answers the tools/list of wrap's refresh with an
// error. Until a listing is read again, balance's calls are refused tools_unknown, NOT sent;
// once the listing answers, two identical balance calls run once, the second replayed.
// Before 2026-12-07 a failed refresh left the listing of before the change in place: balance
// passed through as read-only, and two identical calls of it both ran.
func TestFailedRefreshAfterListChangedLeavesNoOldListing(t *testing.T) {
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
	unfail := marker(t, r, mcptest.ListFailsSuffix)
	if x := call(t, w.Session, "add_tool", `{}`); x.IsError {
		t.Fatalf("add_tool: %+v", x)
	}
	waitFor(t, "wrap's refresh to fail", func() bool {
		return strings.Contains(w.log.String(), "refreshing the tool list after list_changed")
	})
	for range 2 {
		if x := callWithin(t, w, "balance", `{}`); string(x.Meta["effectfence/code"]) != `"tools_unknown"` || !strings.Contains(x.text(), "NOT sent") {
			t.Fatalf("balance after a failed refresh: %q %s, want refused tools_unknown; wrap log:\n%s", x.text(), x.Meta["effectfence/code"], w.log.String())
		}
	}
	if n := r.effectsOf("balance"); n != 0 {
		t.Fatalf("balance, which the server said may write now, ran %d times judged by the listing of before the change", n)
	}
	unfail()
	first, second := callWithin(t, w, "balance", `{}`), callWithin(t, w, "balance", `{}`)
	if first.IsError || first.replayed() || second.IsError || !second.replayed() {
		t.Fatalf("balance once the listing answers: %q, then %q; want it run, then replayed", first.text(), second.text())
	}
	if n := r.effectsOf("balance"); n != 1 {
		t.Fatalf("balance ran %d times, want 1", n)
	}
}

// TestPassedToolsWaitBoundsItsListingWait: a tool the policy passes through (fence: false)
// with a wait of its own: its calls need the server's tool listing too, and wait for it no
// longer than that wait. The child is killed (kill -9) and the one wrap starts next stops
// itself on tools/list: balance is refused tools_unknown within about its 1s, where every
// other tool waits 10 minutes. Before 2026-12-07 (evening) the policy was refused ("wait has
// no effect" beside fence: false), though wrap applied it.
func TestPassedToolsWaitBoundsItsListingWait(t *testing.T) {
	t.Parallel()
	r, w := relistedWrap(t, "  balance:\n    fence: false\n    wait: 1s\n")
	if x := call(t, w.Session, "balance", `{}`); x.IsError {
		t.Fatalf("balance: %+v; wrap log:\n%s", x, w.log.String())
	}
	marker(t, r, mcptest.ListStopsSuffix)
	killChild(t, w)
	unlisted(t, w, "within 1s")
	pid := childOf(t, w)
	defer syscall.Kill(pid, syscall.SIGCONT)
}
