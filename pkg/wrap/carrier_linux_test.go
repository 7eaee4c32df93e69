package wrap_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/sqlitelock"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/procs"
)

// TestKill9WhileTheServersGroupRuns: a wrap killed with SIGKILL takes its child with it (the
// parent-death signal), not what the child started: here the MCP server runs under a shell, as
// the node under npx does, and finishes the call it has after wrap is gone. The claim names
// the server's process group, so while that group runs the claim's holder is not gone: a
// re-run-safe call is not run a second time by the next wrap, and an operator cannot clear the
// claim or resolve it as not having happened, even past its lease; `ledger show` names the
// group to stop. Once the group has ended, the operator can. Before, the next wrap took a
// re-run-safe claim over at once and ran the call while the first run went on, and an operator
// could clear any such claim once its lease lapsed.
func TestKill9WhileTheServersGroupRuns(t *testing.T) {
	t.Parallel()
	needProc(t)
	t.Run("rerun-safe", func(t *testing.T) {
		t.Parallel()
		kill9WhileTheServersGroupRuns(t, "--rerun-safe", "slow")
	})
	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		kill9WhileTheServersGroupRuns(t)
	})
}

func kill9WhileTheServersGroupRuns(t *testing.T, extra ...string) {
	r := newRig(t)
	r.childCmdOverride = []string{"sh", "-c", `"$0"; exit $?`, serverBin}
	until := filepath.Join(r.dir, "until")
	outlived{
		flags:   append([]string{"--lease-secs", "2"}, extra...),
		args:    fmt.Sprintf(`{"ms":0,"tag":"grandchild","until":%q}`, until),
		until:   until,
		started: "slow tag=grandchild started",
		server: func(leader int) int {
			if g := childPids(leader); len(g) == 1 {
				return g[0]
			}
			return 0
		},
		effects: r.effectCount,
	}.run(t, r)
}

// outlived is a call of slow that waits for the file until, run by a process that wrap's
// server started (its direct child is the group's leader).
type outlived struct {
	flags       []string
	args, until string
	started     string               // what the server logs once the call runs
	server      func(leader int) int // the process that runs the call, 0 while none does
	effects     func() int
}

// run kills wrap (kill -9) while the call runs, and holds the rules of
// TestKill9WhileTheServersGroupRuns.
func (o outlived) run(t *testing.T, r *rig) {
	w := r.wrap(o.flags...)
	go func() { _, _ = callE(w.Session, "slow", o.args) }()
	led := r.openLedger()
	claim := waitForClaim(t, led)
	leader := groupLeader(t, w)
	var server int
	waitFor(t, "the server to run the call", func() bool {
		server = o.server(leader)
		return server != 0 && strings.Contains(w.log.String(), o.started)
	})
	if m := regexp.MustCompile(`^[^/]*\+g(\d+)\.\d+/`).FindStringSubmatch(claim.Owner); m == nil || m[1] != fmt.Sprint(leader) {
		t.Fatalf("the claim's owner %q does not name the server's process group %d", claim.Owner, leader)
	}
	if err := syscall.Kill(w.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	waitFor(t, "the group's leader to die with wrap", func() bool { return !alive(leader) })
	if !alive(server) {
		t.Fatal("the process running the call died with wrap: nothing to test")
	}
	time.Sleep(time.Until(claim.LeaseUntil) + 300*time.Millisecond) // past the lease

	w2 := r.wrap(o.flags...)
	// A call run again would wait for the file: made after a while, so it ends and fails here.
	late := time.AfterFunc(10*time.Second, func() { _ = os.WriteFile(o.until, nil, 0o600) })
	x := call(t, w2.Session, "slow", o.args)
	late.Stop()
	if !x.IsError || x.replayed() {
		t.Fatalf("the same call while the first still runs in the killed wrap's server: %+v, want refused", x.text())
	}
	if n := o.effects(); n != 0 {
		t.Fatalf("%d effects, want none yet", n)
	}
	code, stderr := r.ledgerCmd("clear", claim.Intent, "--reason", "checked")
	if code == 0 || !strings.Contains(stderr, fmt.Sprintf("process group %d", leader)) {
		t.Fatalf("clear while the server's group runs: exit %d, %s; want refused, naming the group", code, stderr)
	}
	code, stderr = r.ledgerCmd("resolve", claim.Intent, "--did-not-happen", "--reason", "checked")
	if code == 0 {
		t.Fatalf("resolve --did-not-happen while the server's group runs: exit 0, %s; want refused", stderr)
	}
	if _, out, _ := r.ledgerOut("show", claim.Intent); !strings.Contains(out, fmt.Sprintf("kill -KILL -- -%d", leader)) {
		t.Fatalf("ledger show does not say which group to stop:\n%s", out)
	}

	// The server finishes the call (its answer goes nowhere) and exits: the group has ended.
	if err := os.WriteFile(o.until, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to finish and exit", func() bool { return !alive(server) })
	if n := o.effects(); n != 1 {
		t.Fatalf("%d effects, want the first run's", n)
	}
	if code, stderr := r.ledgerCmd("clear", claim.Intent, "--reason", "found it ran: run it again"); code != 0 {
		t.Fatalf("clear once the group ended: exit %d, %s", code, stderr)
	}
	if x := call(t, w2.Session, "slow", o.args); x.IsError || x.replayed() || o.effects() != 2 {
		t.Fatalf("after the clear the call runs: %+v, %d effects", x.text(), o.effects())
	}
}

// TestClaimNamesTheRestartedServer: the first call after the MCP server died goes to a new
// server process, started for it after its claim was made; the claim names the group the call
// went to, not the dead one's (nor none).
func TestClaimNamesTheRestartedServer(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	w := r.wrap()
	if x := call(t, w.Session, "slow", `{"ms":1,"tag":"first"}`); x.IsError {
		t.Fatalf("first call: %s", x.text())
	}
	kids := childPids(w.Pid())
	if len(kids) != 1 {
		t.Fatalf("wrap has children %v, want its server", kids)
	}
	if err := syscall.Kill(-kids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "wrap to see its server gone", func() bool { return len(childPids(w.Pid())) == 0 })
	time.Sleep(1100 * time.Millisecond) // past the restart backoff
	if x := call(t, w.Session, "slow", `{"ms":1,"tag":"second"}`); x.IsError {
		t.Fatalf("the call after the server died: %s", x.text())
	}
	now := childPids(w.Pid())
	if len(now) != 1 || now[0] == kids[0] {
		t.Fatalf("wrap's server after the restart: %v (before: %d)", now, kids[0])
	}
	led := r.openLedger()
	var owners []string
	if err := led.Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(rec *fence.Record) bool {
			owners = append(owners, rec.Owner)
			return true
		})
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf("+g%d.", kids[0]), fmt.Sprintf("+g%d.", now[0])}
	if len(owners) != 2 {
		t.Fatalf("records' owners: %q, want two", owners)
	}
	for _, w := range want {
		found := false
		for _, o := range owners {
			found = found || strings.Contains(o, w)
		}
		if !found {
			t.Errorf("no record names group %s: %q", w, owners)
		}
	}
}

// TestServerDiesMidCallLeavingAProcessRunningIt: the MCP server's direct process (a shell here,
// npx for a node server) dies mid-call while the process it started goes on with the call. The
// call is answered as of unknown outcome and fenced, and its claim can no longer heal (nobody
// will report its result); but the process group still runs the call without its leader, so an
// operator's clear and resolve --did-not-happen are refused, naming the group, until the group
// has ended. Before, the clear went through at once and the effect landed after it.
func TestServerDiesMidCallLeavingAProcessRunningIt(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	r.childCmdOverride = []string{"sh", "-c", `"$0"; exit $?`, serverBin}
	w := r.wrap()
	until := filepath.Join(r.dir, "until")
	args := fmt.Sprintf(`{"ms":0,"tag":"orphan","until":%q}`, until)
	answered := callInBackground(w.Session, "slow", args)
	led := r.openLedger()
	claim := waitForClaim(t, led)
	leader := groupLeader(t, w)
	var server int
	waitFor(t, "the shell to start the server", func() bool {
		if g := childPids(leader); len(g) == 1 {
			server = g[0]
		}
		return server != 0
	})
	if err := syscall.Kill(leader, syscall.SIGKILL); err != nil { // the shell alone
		t.Fatal(err)
	}
	a := <-answered
	if a.err != nil || !a.x.IsError {
		t.Fatalf("the call whose server died: %+v %v, want a tool error", a.x.text(), a.err)
	}
	if rec, err := led.Status(context.Background(), claim.Intent); err != nil || rec.State != fence.StateUnknown {
		t.Fatalf("its intent: %+v %v, want unknown", rec, err)
	}
	if !alive(server) {
		t.Fatal("the server died with its shell: nothing to test")
	}
	group := fmt.Sprintf("process group %d", leader)
	if code, stderr := r.ledgerCmd("clear", claim.Intent, "--reason", "checked"); code == 0 || !strings.Contains(stderr, group) {
		t.Fatalf("clear while the server's group runs the call: exit %d, %s; want refused, naming the group", code, stderr)
	}
	if code, stderr := r.ledgerCmd("resolve", claim.Intent, "--did-not-happen", "--reason", "checked"); code == 0 || !strings.Contains(stderr, group) {
		t.Fatalf("resolve --did-not-happen while the server's group runs the call: exit %d, %s; want refused", code, stderr)
	}
	if _, out, _ := r.ledgerOut("show", claim.Intent); !strings.Contains(out, fmt.Sprintf("kill -KILL -- -%d", leader)) {
		t.Fatalf("ledger show does not say which group to stop:\n%s", out)
	}
	if err := os.WriteFile(until, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to finish the call and exit", func() bool { return !alive(server) })
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d effects, want the call's", n)
	}
	if code, stderr := r.ledgerCmd("resolve", claim.Intent, "--happened", "--reason", "found it"); code != 0 {
		t.Fatalf("resolve once the group ended: exit %d, %s", code, stderr)
	}
}

// TestKill9WhileNpxNodeRunsTheCall: the same as TestKill9WhileTheServersGroupRuns with the
// real thing: a node MCP server on the TypeScript SDK started by npx (npm exec, then a shell,
// then node: wrap's grandchild's child), killed wrap's call still running in node. node reads
// the end of its stdin and finishes the call before it exits; until then the claim is held:
// the next wrap does not run the call (it is re-run safe), and an operator's clear is refused.
func TestKill9WhileNpxNodeRunsTheCall(t *testing.T) {
	t.Parallel()
	needProc(t)
	peers, _ := filepath.Abs("../../.peers")
	if _, err := os.Stat(filepath.Join(peers, "node_modules/@modelcontextprotocol/sdk/package.json")); err != nil {
		t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
	}
	for _, bin := range []string{"node", "npx"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("skipping: %s is not installed", bin)
		}
	}
	script, _ := filepath.Abs(filepath.Join("testdata", "slow_server.mjs"))
	r := newRig(t)
	effects := filepath.Join(r.dir, "node-effects")
	r.childCmdOverride = []string{"npx", "--no-install", "--", "node", script}
	r.extraEnv = []string{"PEERS=" + peers, "EFFECTS=" + effects}
	until := filepath.Join(r.dir, "until")
	outlived{
		flags:   []string{"--lease-secs", "2", "--rerun-safe", "slow"},
		args:    fmt.Sprintf(`{"tag":"npx","until":%q}`, until),
		until:   until,
		started: "npx started in pid",
		server: func(leader int) int {
			for _, p := range procs.Group(leader) {
				if comm(p) == "node" {
					return p
				}
			}
			return 0
		},
		effects: func() int {
			b, _ := os.ReadFile(effects)
			return strings.Count(string(b), "\n")
		},
	}.run(t, r)
}

// groupLeader returns wrap's one child, the leader of its server's process group, which the
// test kills when it fails (what outlives wrap would run on otherwise).
func groupLeader(t *testing.T, w *wrapProc) int {
	t.Helper()
	kids := childPids(w.Pid())
	if len(kids) != 1 {
		t.Fatalf("wrap has children %v, want its server's leader", kids)
	}
	t.Cleanup(func() {
		if t.Failed() {
			_ = syscall.Kill(-kids[0], syscall.SIGKILL)
		}
	})
	return kids[0]
}

// comm is the command name of process pid.
func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// TestCarrierRecordedAfterASlowLedger: a call whose server was restarted after its claim was
// made goes to the new server's process group, and the claim is renewed naming that group
// before the call is sent (carry). When the ledger does not take that renewal in time (another
// process holds a SQLite ledger's write lock through the restart), the call is sent all the
// same; the lease renewals after it must then record the new group. Before, none did: the
// claim named no group for the whole call, so a wrap killed during it had its re-run-safe
// claim taken over at once while the server's process still ran the call (seen with the real
// binary: two executions).
func TestCarrierRecordedAfterASlowLedger(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	marker := filepath.Join(t.TempDir(), "started")
	// The server runs under a shell (as node under npx), slow to start again once it died.
	r.childCmdOverride = []string{"sh", "-c", `[ -e "$1" ] && sleep 2; : > "$1"; "$0"; exit $?`, serverBin, marker}
	w := r.wrap("--lease-secs", "3", "--rerun-safe", "slow")
	if x := call(t, w.Session, "slow", `{"ms":1,"tag":"first"}`); x.IsError {
		t.Fatalf("first call: %s", x.text())
	}
	old := childPids(w.Pid())
	if len(old) != 1 {
		t.Fatalf("wrap has children %v, want its server", old)
	}
	if err := syscall.Kill(-old[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "wrap to see its server gone", func() bool { return len(childPids(w.Pid())) == 0 })
	time.Sleep(1100 * time.Millisecond) // past the restart backoff
	done := callInBackground(w.Session, "slow", `{"ms":8000,"tag":"carried"}`)
	led := r.openLedger()
	waitForClaim(t, led)
	unlock := sqlitelock.Hold(t, r.ledger)
	for sent := time.Now().Add(20 * time.Second); !strings.Contains(w.log.String(), "slow tag=carried started"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(sent) {
			unlock()
			t.Fatalf("the call was not sent while another process held the ledger's lock; log:\n%s", w.log.String())
		}
	}
	unlock()
	now := childPids(w.Pid())
	if len(now) != 1 || now[0] == old[0] {
		t.Fatalf("wrap's server after the restart: %v (before: %d)", now, old[0])
	}
	want := fmt.Sprintf("+g%d.", now[0])
	var owner string
	deadline := time.Now().Add(15 * time.Second) // five lease renewals
	for !strings.Contains(owner, want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		_ = led.Store().View(context.Background(), func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight}}, func(rec *fence.Record) bool {
				owner = rec.Owner
				return false
			})
		})
	}
	if !strings.Contains(owner, want) {
		t.Fatalf("the claim of a call sent to the restarted server (group %d) is held by %q, naming no such group; log:\n%s", now[0], owner, w.log.String())
	}
	<-done
}
