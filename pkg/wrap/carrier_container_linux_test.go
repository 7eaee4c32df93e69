package wrap_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestKill9InAContainerWhileTheServersGroupRuns is TestKill9WhileTheServersGroupRuns with the
// killed wrap in a container on this host (a PID namespace of its own, below the test's: the
// host's), and everything after the kill done from the host: docs/RELIABILITY.md's "A holder in
// a container on the judge's host". The claim counts its holder and carrier in the container's
// pids, which mean other processes here; the host finds the group in its own /proc (NSpid,
// NSpgid) and so holds the claim while the group runs: a re-run-safe call is not run a second
// time by the host's next wrap past the lease, a fenced one neither, and `ledger clear` and
// `resolve --did-not-happen` refuse, naming the group by its number on the host (the number to
// kill here; the container's means another process). Once the group has ended the holder is
// "cannot tell" (its pid is not in sight), never dead: the claim, fenced unknown by the
// duplicate past its lease, stays fenced, and the host's next wrap does not run the call until
// an operator has cleared it, which a clear without --force now may (a lapsed claim whose
// holder is out of sight, as one of another host).
func TestKill9InAContainerWhileTheServersGroupRuns(t *testing.T) {
	inAContainerBothWays(t, kill9InAContainer)
}

// inAContainerBothWays runs fn, which needs unshare, as two parallel subtests: with a call
// declared safe to re-run ("rerun-safe") and with a fenced one.
func inAContainerBothWays(t *testing.T, fn func(t *testing.T, unshare string, extra ...string)) {
	t.Parallel()
	unshare := needUnshare(t, "a PID namespace")
	t.Run("rerun-safe", func(t *testing.T) {
		t.Parallel()
		fn(t, unshare, "--rerun-safe", "slow")
	})
	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		fn(t, unshare)
	})
}

func kill9InAContainer(t *testing.T, unshare string, extra ...string) {
	r := newRig(t)
	flags := append([]string{"--lease-secs", "2"}, extra...)
	c := startInAContainer(t, r, unshare, flags)
	claim, leader, server, until, args := c.claim, c.leader, c.server, c.until, c.args
	led := r.openLedger()
	rec := c.kill9(t, r)
	time.Sleep(time.Until(rec.LeaseUntil) + 300*time.Millisecond) // past the lease

	w2 := r.wrap(flags...)
	// A call run again would wait for the file: made after a while, so it ends and fails here.
	late := time.AfterFunc(10*time.Second, func() { _ = os.WriteFile(until, nil, 0o600) })
	x := call(t, w2.Session, "slow", args)
	late.Stop()
	if n := r.effectCount(); n != 0 {
		t.Fatalf("%d effects while the container's server still runs the first call, want none: the host ran it again (%s)", n, x.text())
	}
	if !x.IsError || x.replayed() {
		t.Fatalf("the same call from the host while the container's server still runs the first: %+v, want refused", x.text())
	}
	// The claim is fenced, for the reason that the group runs, named as the host knows it.
	if g := groupNamed(x.text()); g != leader {
		t.Fatalf("the host's refusal names process group %d, want %d (the host's number of the container's group %d):\n%s", g, leader, c.pgidThere, x.text())
	}
	if rec, err := led.Status(context.Background(), claim.Intent); err != nil || rec.State != fence.StateUnknown || rec.Token != claim.Token {
		t.Fatalf("the claim after the host's duplicate: %+v %v; want claim %d unknown", rec, err, claim.Token)
	}
	code, stderr := r.ledgerCmd("clear", claim.Intent, "--reason", "checked")
	if code == 0 {
		t.Fatalf("clear on the host while the container's server group runs: exit 0, %s; want refused", stderr)
	}
	if g := groupNamed(stderr); g != leader {
		t.Fatalf("the refused clear names process group %d, want %d (the host's number of the container's group %d):\n%s", g, leader, c.pgidThere, stderr)
	}
	code, stderr = r.ledgerCmd("resolve", claim.Intent, "--did-not-happen", "--reason", "checked")
	if code == 0 || groupNamed(stderr) != leader {
		t.Fatalf("resolve --did-not-happen on the host while the container's server group runs: exit %d, %s; want refused, naming group %d", code, stderr, leader)
	}
	if _, out, _ := r.ledgerOut("show", claim.Intent); !strings.Contains(out, fmt.Sprintf("kill -KILL -- -%d)", leader)) {
		t.Fatalf("ledger show on the host does not say to stop group %d:\n%s", leader, out)
	}

	// The server finishes the call (its answer goes nowhere) and exits: the group has ended.
	if err := os.WriteFile(until, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to finish and exit", func() bool { return !alive(server) })
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d effects, want the first run's", n)
	}
	// Its holder is now out of the host's sight: cannot tell, never dead. The group ends with
	// its last member, which may exit a moment after the server (a full CI run at load 12
	// once judged the holder alive here, as TestContainerHolderGoneWithinItsLease had).
	waitFor(t, "the server's group to end", func() bool { return fence.OwnerLiveness(claim.Owner) != fence.Alive })
	if l := fence.OwnerLiveness(claim.Owner); l != fence.CannotTell {
		t.Fatalf("the container's holder, gone with its group, judged from the host: %s, want cannot tell", l)
	}
	// The claim stays fenced: the next call is not run...
	if x := call(t, w2.Session, "slow", args); !x.IsError || x.replayed() || r.effectCount() != 1 {
		t.Fatalf("the same call once the group ended, the claim fenced: %+v, %d effects; want refused, not run", x.text(), r.effectCount())
	}
	// ...until an operator on the host clears it, now without --force.
	if _, out, _ := r.ledgerOut("show", claim.Intent); !strings.Contains(out, "\nfenced: check in the real system") {
		t.Fatalf("ledger show once the group ended does not leave it to the operator:\n%s", out)
	}
	if code, stderr := r.ledgerCmd("clear", claim.Intent, "--reason", "found it ran: run it again"); code != 0 {
		t.Fatalf("clear on the host once the group ended: exit %d, %s", code, stderr)
	}
	if x := call(t, w2.Session, "slow", args); x.IsError || x.replayed() || r.effectCount() != 2 {
		t.Fatalf("after the clear the call runs: %+v, %d effects", x.text(), r.effectCount())
	}
}

// TestContainerHolderGoneWithinItsLease: the container's wrap killed -9 and its server's group
// ended (the call finished) before the claim's lease lapsed. A holder of the host's own PID
// namespace is then dead, its claim taken over (re-run safe) or fenced at once; the container's
// is out of the host's sight, "cannot tell", never dead (what is not found there may live in
// a namespace the host cannot see): the claim holds until its lease lapses, and the host's
// duplicate, waiting for it meanwhile, is then given what a lapsed claim of a holder out of
// sight gets: a re-run-safe call runs again (taken over), a fenced one is refused as unknown.
func TestContainerHolderGoneWithinItsLease(t *testing.T) {
	inAContainerBothWays(t, goneWithinTheLease)
}

func goneWithinTheLease(t *testing.T, unshare string, extra ...string) {
	r := newRig(t)
	// 8 s: the kill, the end of the call and the duplicate's start fit well inside the lease
	// on a loaded machine; the duplicate then waits for it (wrap's --wait, 30 s, is longer).
	flags := append([]string{"--lease-secs", "8"}, extra...)
	c := startInAContainer(t, r, unshare, flags)
	w2 := r.wrap(flags...) // on the host, started before the kill: the rest is quick
	// A duplicate on the host that waits 1 s, while the lease runs and the group runs the call,
	// is refused in flight: the sender is gone, the group named; and what follows the group's
	// end is told as it is for a holder the host cannot judge gone: only the lease's lapse frees
	// the claim. Before 2026-12-07 it said a retry ran the call (or the claim was fenced) as soon
	// as the group ended, and that retry was refused as still running until the lapse.
	impatient := r.wrap(append(flags, "--wait", "1s")...)
	rec := c.kill9(t, r)
	x := call(t, impatient.Session, "slow", c.args)
	if !x.IsError || x.replayed() || r.effectCount() != 0 {
		t.Fatalf("the host's duplicate while the container's group runs the call: %+v, %d effects; want refused in flight", x.text(), r.effectCount())
	}
	if !strings.Contains(x.text(), fmt.Sprintf("process group %d it started still runs", c.leader)) || !strings.Contains(x.text(), "cannot judge gone before then") {
		t.Fatalf("the host's in-flight refusal does not name group %d, or does not say that only the lease's lapse frees the claim:\n%s", c.leader, x.text())
	}
	if err := os.WriteFile(c.until, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to finish and exit", func() bool { return !alive(c.server) })
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d effects, want the first run's", n)
	}
	// The group ends with its last member, which may exit a moment after the server (CI, at
	// load 19, once judged the holder alive here).
	waitFor(t, "the server's group to end", func() bool { return fence.OwnerLiveness(c.claim.Owner) != fence.Alive })
	if l := fence.OwnerLiveness(c.claim.Owner); l != fence.CannotTell {
		t.Fatalf("the container's holder, gone with its group, judged from the host: %s, want cannot tell", l)
	}
	sent := time.Now()
	if !sent.Before(rec.LeaseUntil) {
		t.Fatalf("the duplicate was sent at %s, after the lease lapsed at %s: too slow to test what happens within it", sent.Format(time.StampMilli), rec.LeaseUntil.Format(time.StampMilli))
	}
	x = call(t, w2.Session, "slow", c.args)
	answered := time.Now()
	if answered.Before(rec.LeaseUntil) {
		t.Fatalf("the host's duplicate was answered at %s, before the claim's lease lapsed at %s: its holder in the container was judged dead (%s; %d effects)", answered.Format(time.StampMilli), rec.LeaseUntil.Format(time.StampMilli), x.text(), r.effectCount())
	}
	after, err := r.openLedger().Status(context.Background(), c.claim.Intent)
	if err != nil {
		t.Fatal(err)
	}
	if len(extra) > 0 { // re-run safe: taken over once the lease lapsed, and run
		if x.IsError || x.replayed() || r.effectCount() != 2 || after.State != fence.StateDone || after.Token == c.claim.Token {
			t.Fatalf("the re-run-safe call once the lease lapsed: %+v (replayed %v), %d effects, its record %s by claim %d; want run again by a claim of its own", x.text(), x.replayed(), r.effectCount(), after.State, after.Token)
		}
		return
	}
	if !x.IsError || x.replayed() || r.effectCount() != 1 || after.State != fence.StateUnknown || after.Token != c.claim.Token || !strings.Contains(after.Reason, "holder out of sight") {
		t.Fatalf("the fenced call once the lease lapsed: %+v, %d effects, its record %s by claim %d (%s); want refused, claim %d unknown with its holder out of sight", x.text(), r.effectCount(), after.State, after.Token, after.Reason, c.claim.Token)
	}
	if code, stderr := r.ledgerCmd("clear", c.claim.Intent, "--reason", "found it ran: run it again"); code != 0 {
		t.Fatalf("clear on the host once the lease lapsed: exit %d, %s", code, stderr)
	}
}

// contained is a call of slow that waits for the file until, sent to a wrap in a container (a
// PID namespace of its own under this process's) whose server runs under a shell.
type contained struct {
	args, until string
	claim       *fence.Record
	init        int // the container's init, a shell that ran wrap
	holder      int // the wrap
	leader      int // its server's shell, leading the server's process group
	server      int // the server, which runs the call
	pgidThere   int // the group's number in the container
}

// startInAContainer starts a wrap with flags in a container and sends it the call; it returns
// once the server runs it. The pids are this process's.
func startInAContainer(t *testing.T, r *rig, unshare string, flags []string) *contained {
	t.Helper()
	c := &contained{until: filepath.Join(r.dir, "until")}
	c.args = fmt.Sprintf(`{"ms":0,"tag":"contained","until":%q}`, c.until)
	// The container's init is a shell that runs wrap and then stays, reaping what is left to
	// it, as a container's init does (tini, docker-init): wrap is not the init, whose death
	// would kill every process of the namespace, the server's group with it. Its server runs
	// under a shell (as node under npx): the shell, the group's leader, dies with wrap (its
	// parent-death signal), the server goes on with the call.
	r.prefix = []string{unshare, "--pid", "--fork", "--mount-proc", "--", "sh", "-c", `"$@"; while sleep 1; do :; done`, "sh"}
	r.childCmdOverride = []string{"sh", "-c", `"$0"; exit $?`, serverBin}
	w := r.wrap(flags...)
	r.prefix = nil // the wraps after this one run on the host
	waitFor(t, "the container's init to run wrap", func() bool {
		c.init, c.holder = onlyChild(w.Pid()), 0
		if c.init != 0 {
			c.holder = onlyChild(c.init)
		}
		return c.holder != 0
	})
	// Killed, the init takes its namespace with it: what runs there ends with the test.
	t.Cleanup(func() { _ = syscall.Kill(c.init, syscall.SIGKILL) })

	go func() { _, _ = callE(w.Session, "slow", c.args) }()
	c.claim = waitForClaim(t, r.openLedger())
	waitFor(t, "the server to run the call", func() bool {
		if c.leader = onlyChild(c.holder); c.leader != 0 {
			c.server = onlyChild(c.leader)
		}
		return c.server != 0 && strings.Contains(w.log.String(), "slow tag=contained started")
	})
	c.pgidThere = nsPID(c.leader)
	// The owner counts the holder and its carrier in the container: numbers that mean other
	// processes on the host.
	m := regexp.MustCompile(`^[^/]*\+g(\d+)\.\d+/(\d+)/\d+/[^/]*/(\d+)$`).FindStringSubmatch(c.claim.Owner)
	here := strings.Split(fence.LocalOwner(), "/")
	if m == nil || m[1] != strconv.Itoa(c.pgidThere) || m[2] != strconv.Itoa(nsPID(c.holder)) || m[3] == here[len(here)-1] {
		t.Fatalf("the claim's owner %q does not name the holder (pid %d in its namespace) and its server's group (%d there) in a PID namespace of their own", c.claim.Owner, nsPID(c.holder), c.pgidThere)
	}
	if c.pgidThere == c.leader {
		t.Fatalf("the group's number in the container is its number on the host (%d): the test cannot tell which one a message names", c.leader)
	}
	return c
}

// kill9 kills the container's wrap with SIGKILL and returns its claim's record once the wrap
// and its server's leader are gone, the server still running the call.
func (c *contained) kill9(t *testing.T, r *rig) fence.Record {
	t.Helper()
	if err := syscall.Kill(c.holder, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed wrap and its server's leader to be gone", func() bool { return !alive(c.holder) && !alive(c.leader) })
	if !alive(c.server) || !alive(c.init) {
		t.Fatalf("the process running the call (%v) or the container's init (%v) died with wrap: nothing to test", alive(c.server), alive(c.init))
	}
	// No renewal comes after the kill: the lease the record holds now is the last.
	rec, err := r.openLedger().Status(context.Background(), c.claim.Intent)
	if err != nil || rec.State != fence.StateInFlight || rec.Token != c.claim.Token {
		t.Fatalf("the killed wrap's claim: %+v %v; want it in flight", rec, err)
	}
	return rec
}

// onlyChild is the one live child of pid, 0 while it has none or more than one.
func onlyChild(pid int) int {
	if kids := childPids(pid); len(kids) == 1 {
		return kids[0]
	}
	return 0
}

// nsPID is the pid of process host (a pid of this process's /proc) in its own PID namespace:
// the last field of NSpid in its status; 0 when it cannot be read.
func nsPID(host int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", host))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.Atoi(f[len(f)-1])
				return n
			}
		}
	}
	return 0
}

// groupNamed is the process group text names ("process group N"), 0 when it names none or
// two different ones.
func groupNamed(text string) int {
	g := 0
	for _, m := range regexp.MustCompile(`process group (\d+)`).FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		if g != 0 && n != g {
			return 0
		}
		g = n
	}
	return g
}
