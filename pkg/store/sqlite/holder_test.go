//go:build linux

package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// holderHelper is a holder process: it opens the ledger, claims EFFECTFENCE_TEST_INTENT with a
// lease of EFFECTFENCE_TEST_LEASE_MS and no heartbeat, prints "owner OWNER" and "claimed", and
// then obeys stdin: "commit" commits (printing "committed HASH" or "refused CODE"),
// "heartbeat" renews ("renewed"), "release" and "abort" end the claim ("ended"), "judge OWNER"
// prints what this process can tell about OWNER, "open PATH" opens another ledger beside and
// writes to it once ("opened"), and keeps it open.
func holderHelper() error {
	if h := os.Getenv("EFFECTFENCE_TEST_HOSTNAME"); h != "" {
		if err := syscall.Sethostname([]byte(h)); err != nil {
			return err
		}
	}
	ms, err := strconv.Atoi(os.Getenv("EFFECTFENCE_TEST_LEASE_MS"))
	if err != nil {
		return err
	}
	st, err := sqlite.Open(ctx, os.Getenv("EFFECTFENCE_TEST_LEDGER"), sqlite.Options{})
	if err != nil {
		return err
	}
	eng := fence.New(st, fence.Config{LeaseTTL: time.Duration(ms) * time.Millisecond})
	defer eng.Close()
	fmt.Printf("owner %s\n", fence.LocalOwner())
	req := holderReq(os.Getenv("EFFECTFENCE_TEST_INTENT"))
	req.RerunSafe = os.Getenv("EFFECTFENCE_TEST_RERUN_SAFE") != ""
	req.Carrier = os.Getenv("EFFECTFENCE_TEST_CARRIER")
	adm, err := eng.Prepare(ctx, req)
	if err != nil {
		return err
	}
	fmt.Println("claimed")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "commit":
			c, err := eng.Commit(ctx, *adm.Ticket, []byte(fmt.Sprintf(`{"by":%d}`, os.Getpid())))
			if err != nil {
				fmt.Printf("refused %s\n", fence.CodeOf(err))
			} else {
				fmt.Printf("committed %s\n", c.Hash)
			}
		case "heartbeat":
			if _, err := eng.Heartbeat(ctx, *adm.Ticket); err != nil {
				fmt.Printf("refused %s\n", fence.CodeOf(err))
			} else {
				fmt.Println("renewed")
			}
		case "release", "abort":
			end := eng.Release
			if cmd == "abort" {
				end = eng.Abort
			}
			if err := end(ctx, *adm.Ticket, "holder says "+cmd); err != nil {
				fmt.Printf("refused %s\n", fence.CodeOf(err))
			} else {
				fmt.Println("ended")
			}
		case "judge":
			fmt.Printf("judged %s\n", fence.OwnerLiveness(arg))
		case "open":
			other, err := sqlite.Open(ctx, arg, sqlite.Options{})
			if err == nil {
				err = other.Update(ctx, func(tx fence.Tx) error { return tx.SetDomainSeq("d", 1) })
			}
			if err != nil {
				fmt.Printf("refused %v\n", err)
			} else {
				fmt.Println("opened")
			}
		}
	}
	return nil
}

func holderReq(intent string) fence.Request {
	return fence.Request{Intent: intent, Tool: "charge_card", Args: []byte(`{"amount":4900}`)}
}

// holderProc is a running holder process.
type holderProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	owner string
}

// startHolder runs the test binary as a holder, under prefix (e.g. unshare) if given.
func startHolder(t *testing.T, ledger, intent string, lease time.Duration, rerunSafe bool, env []string, prefix ...string) *holderProc {
	t.Helper()
	all := []string{"EFFECTFENCE_TEST_HOLDER=1", "EFFECTFENCE_TEST_LEDGER=" + ledger,
		"EFFECTFENCE_TEST_INTENT=" + intent, fmt.Sprintf("EFFECTFENCE_TEST_LEASE_MS=%d", lease.Milliseconds())}
	if rerunSafe {
		all = append(all, "EFFECTFENCE_TEST_RERUN_SAFE=1")
	}
	cmd, in, out := startSelf(t, append(all, env...), prefix...)
	h := &holderProc{t: t, cmd: cmd, in: in, out: out}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT) }) // runs before startSelf's kill
	line := h.line()
	owner, ok := strings.CutPrefix(line, "owner ")
	if !ok {
		t.Fatalf("holder said %q, want its owner", line)
	}
	h.owner = owner
	if l := h.line(); l != "claimed" {
		t.Fatalf("holder said %q, want claimed", l)
	}
	return h
}

func (h *holderProc) line() string {
	h.t.Helper()
	if !h.out.Scan() {
		h.t.Fatalf("holder ended: %v", h.out.Err())
	}
	return h.out.Text()
}

func (h *holderProc) say(s string) string {
	h.t.Helper()
	if _, err := fmt.Fprintln(h.in, s); err != nil {
		h.t.Fatal(err)
	}
	return h.line()
}

// procState is field 3 of /proc/PID/stat.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

func waitState(t *testing.T, pid int, want byte) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for procState(pid) != want {
		if time.Now().After(deadline) {
			t.Fatalf("process %d never reached state %c (is %c)", pid, want, procState(pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitZombie waits until pid is a zombie whose threads are all gone. A killed process's main
// thread reads Z a few milliseconds before its last thread has exited, and while another runs
// the process is judged alive (a main thread that exited on its own reads Z too).
func waitZombie(t *testing.T, pid int) {
	t.Helper()
	waitState(t, pid, 'Z')
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "\nThreads:\t1\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is a zombie with threads still running:\n%s", pid, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantUnknown(t *testing.T, eng *fence.Engine, intent string) {
	t.Helper()
	_, err := eng.Prepare(ctx, holderReq(intent))
	var pf fence.PriorFailureError
	if !errors.As(err, &pf) || pf.State != fence.StateUnknown {
		t.Fatalf("prepare of %s: %v; want prior_failure (unknown)", intent, err)
	}
}

func eventKinds(t *testing.T, eng *fence.Engine, intent string) []string {
	t.Helper()
	var kinds []string
	if err := eng.Store().View(ctx, func(tx fence.Tx) error {
		return tx.Events(intent, func(ev fence.Event) bool { kinds = append(kinds, ev.Kind); return true })
	}); err != nil {
		t.Fatal(err)
	}
	return kinds
}

// TestStoppedHolderFencedThenHealed: a holder SIGSTOPped past its lease is alive and silent.
// Its claim becomes unknown, never taken over (although declared re-run safe); after SIGCONT
// its own commit heals the intent and duplicates replay its result. So in this PID namespace,
// and in a namespace of its own below this one (a container on this host, which this process
// sees: before 2026-12-07 such a holder was "cannot tell" here, and its claim was taken over
// and run a second time while it was stopped).
func TestStoppedHolderFencedThenHealed(t *testing.T) {
	t.Run("beside", func(t *testing.T) { stoppedHolderFencedThenHealed(t, nil) })
	t.Run("child PID namespace", func(t *testing.T) {
		unshare := needUnshare(t)
		stoppedHolderFencedThenHealed(t, []string{unshare, "-p", "--fork", "--mount-proc", "--"})
	})
}

func stoppedHolderFencedThenHealed(t *testing.T, prefix []string) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	const lease = 800 * time.Millisecond
	h := startHolder(t, path, "stop:1", lease, true, nil, prefix...)
	pid := h.cmd.Process.Pid
	if prefix != nil {
		pid = unshareChild(t, pid)
	}
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{LeaseTTL: lease})
	if _, err := eng.Prepare(ctx, holderReq("stop:1")); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("while the lease runs: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, 'T')
	time.Sleep(2 * lease)
	wantUnknown(t, eng, "stop:1") // not taken over
	if l := fence.OwnerLiveness(h.owner); l != fence.Alive {
		t.Fatalf("stopped holder %s judged %s, want alive", h.owner, l)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	got := h.say("commit")
	hash, ok := strings.CutPrefix(got, "committed ")
	if !ok {
		t.Fatalf("resumed holder's commit: %s", got)
	}
	adm, err := eng.Prepare(ctx, holderReq("stop:1"))
	if err != nil || adm.Fresh() || adm.Cert.Hash != hash {
		t.Fatalf("after the heal: %+v %v; want the holder's cert %s", adm, err, hash)
	}
	if kinds := strings.Join(eventKinds(t, eng, "stop:1"), ","); kinds != "expired,heal" {
		t.Fatalf("audit trail %s, want expired,heal", kinds)
	}
}

// unshareChild is the pid of the one child of unshare --fork (pid up): the process it started
// in the new namespace.
func unshareChild(t *testing.T, up int) int {
	t.Helper()
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", up, up))
	pid, err2 := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil || err2 != nil {
		t.Fatalf("the process under unshare (pid %d): children %q: %v %v", up, kids, err, err2)
	}
	return pid
}

// TestZombieHolderIsDead: a holder killed but not yet reaped (state Z) is dead: its claim is
// unknown at once, and a re-run-safe one is taken over, without waiting for the lease.
func TestZombieHolderIsDead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	for _, rerunSafe := range []bool{false, true} {
		intent := fmt.Sprintf("zombie:%v", rerunSafe)
		h := startHolder(t, path, intent, time.Hour, rerunSafe, nil)
		if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitZombie(t, h.cmd.Process.Pid) // killed, not reaped: the test has not called Wait
		if l := fence.OwnerLiveness(h.owner); l != fence.Dead {
			t.Fatalf("zombie judged %s, want dead", l)
		}
		if !rerunSafe {
			wantUnknown(t, eng, intent)
			continue
		}
		adm, err := eng.Prepare(ctx, holderReq(intent))
		if err != nil || !adm.Fresh() || !adm.Ticket.Reclaimed {
			t.Fatalf("re-run-safe claim of a zombie: %+v %v; want reclaimed", adm, err)
		}
	}
}

// TestKilledHolderUnknownAtOnce: kill -9 of a holder (reaped) fences its claim at once.
func TestKilledHolderUnknownAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	h := startHolder(t, path, "kill:1", time.Hour, false, nil)
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	wantUnknown(t, eng, "kill:1")
}

func needUnshare(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to create namespaces with unshare")
	}
	p, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("skipped: the unshare command is not installed")
	}
	return p
}

// TestUnshareUTSHolder: a holder in its own UTS namespace (another host name) but this PID
// namespace is seen for what it is: alive while it runs (never taken over, its late commit
// heals), dead once killed (unknown at once, never re-run after its lease).
func TestUnshareUTSHolder(t *testing.T) {
	unshare := needUnshare(t)
	path := filepath.Join(t.TempDir(), "ledger.db")
	const lease = 800 * time.Millisecond
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{LeaseTTL: lease})

	h := startHolder(t, path, "uts:alive", lease, true, []string{"EFFECTFENCE_TEST_HOSTNAME=container-7"}, unshare, "-u", "--")
	if !strings.HasPrefix(h.owner, "container-7/") {
		t.Fatalf("holder owner %q: the UTS namespace did not take", h.owner)
	}
	if l := fence.OwnerLiveness(h.owner); l != fence.Alive {
		t.Fatalf("holder with another host name judged %s, want alive", l)
	}
	time.Sleep(2 * lease)
	wantUnknown(t, eng, "uts:alive") // alive and silent: fenced, not taken over
	if got := h.say("commit"); !strings.HasPrefix(got, "committed ") {
		t.Fatalf("late commit: %s", got)
	}

	k := startHolder(t, path, "uts:killed", lease, false, []string{"EFFECTFENCE_TEST_HOSTNAME=container-8"}, unshare, "-u", "--")
	_ = k.cmd.Process.Kill()
	_ = k.cmd.Wait()
	if l := fence.OwnerLiveness(k.owner); l != fence.Dead {
		t.Fatalf("killed holder with another host name judged %s, want dead", l)
	}
	wantUnknown(t, eng, "uts:killed")
}

// TestHolderWithAHostNameNotUTF8KeepsItsCarrier: a host name is the kernel's bytes, UTF-8 or
// not (sethostname takes any), and the ledger keeps an owner string as JSON, each byte that is
// not UTF-8 as U+FFFD. A holder whose host name is not UTF-8 then did not know its own claim
// (Engine.mine compared its owner string with the stored one), and its first heartbeat
// replaced the owner with its own, dropping the carrier: killed with -9 while the process
// group it sent the call to still ran it, its re-run-safe claim was taken over at once, a
// second execution (seen with a real wrap in such a UTS namespace and a server under sh).
func TestHolderWithAHostNameNotUTF8KeepsItsCarrier(t *testing.T) {
	unshare := needUnshare(t)
	path := filepath.Join(t.TempDir(), "ledger.db")
	group := exec.Command("sh", "-c", "sleep 60 & read x")
	group.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	end, err := group.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := group.Start(); err != nil {
		t.Skipf("skipped: no sh: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-group.Process.Pid, syscall.SIGKILL); _ = end.Close(); _ = group.Wait() })
	carrier := fence.GroupCarrier(group.Process.Pid)
	if carrier == "" {
		t.Skip("skipped: this process cannot name a process group (its /proc)")
	}
	h := startHolder(t, path, "utf8:carried", time.Hour, true,
		[]string{"EFFECTFENCE_TEST_HOSTNAME=bad\xffhost", "EFFECTFENCE_TEST_CARRIER=" + carrier}, unshare, "-u", "--")
	if got := h.say("heartbeat"); got != "renewed" {
		t.Fatalf("heartbeat: %s", got)
	}
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	rec, err := eng.Status(context.Background(), "utf8:carried")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rec.Owner, "+"+carrier+"/") {
		t.Errorf("after its holder's heartbeat the claim's owner is %q: its carrier %s is gone", rec.Owner, carrier)
	}
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
	// The holder is gone, the group it sent the call to runs: the claim is held.
	req := holderReq("utf8:carried")
	req.RerunSafe = true
	adm, err := eng.Prepare(context.Background(), req)
	if err == nil {
		t.Fatalf("the re-run-safe claim of a killed holder whose carrier runs was taken over (admitted %+v): a second execution while the first runs", adm.Ticket)
	}
	if !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("prepare: %v, want intent_in_flight", err)
	}
}

// TestUnsharePIDHolder: a holder in another PID namespace. From this namespace, its parent (a
// host and its container), it is seen: alive while it runs. From a sibling namespace (another
// container) its pid means nothing: "cannot tell", never dead. Alive and silent past its
// lease, its claim becomes unknown, and its own late commit heals it. Inside, a process whose
// /proc is not its own namespace's judges nobody.
func TestUnsharePIDHolder(t *testing.T) {
	unshare := needUnshare(t)
	path := filepath.Join(t.TempDir(), "ledger.db")
	const lease = 800 * time.Millisecond
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{LeaseTTL: lease})

	// The sibling first: started between the holder's claim and the check of its running
	// lease, it took longer than the lease under CI's load.
	sibling := startHolder(t, path, "pidns:sibling", lease, false, nil, unshare, "-p", "--fork", "--mount-proc", "--")
	h := startHolder(t, path, "pidns:1", lease, false, nil, unshare, "-p", "--fork", "--mount-proc", "--")
	if _, err := eng.Prepare(ctx, holderReq("pidns:1")); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("while its lease runs: %v", err)
	}
	if l := fence.OwnerLiveness(h.owner); l != fence.Alive {
		t.Fatalf("holder in a child PID namespace (%s) judged %s from its parent namespace, want alive", h.owner, l)
	}
	if got := sibling.say("judge " + h.owner); got != "judged cannot tell" {
		t.Fatalf("holder in a sibling PID namespace (%s): %q, want cannot tell", h.owner, got)
	}
	time.Sleep(2 * lease)
	wantUnknown(t, eng, "pidns:1")
	got := h.say("commit")
	hash, ok := strings.CutPrefix(got, "committed ")
	if !ok {
		t.Fatalf("late commit from another PID namespace: %s", got)
	}
	if adm, err := eng.Prepare(ctx, holderReq("pidns:1")); err != nil || adm.Cert == nil || adm.Cert.Hash != hash {
		t.Fatalf("after the heal: %+v %v", adm, err)
	}
	if got := h.say("judge " + fence.LocalOwner()); got != "judged cannot tell" {
		t.Fatalf("inside the namespace, this process is %q, want cannot tell", got)
	}

	// Without --mount-proc the holder's /proc shows the parent namespace: unsound, so it judges
	// nobody, not even a process it could find there.
	u := startHolder(t, path, "pidns:2", lease, false, nil, unshare, "-p", "--fork", "--")
	if got := u.say("judge " + fence.LocalOwner()); got != "judged cannot tell" {
		t.Fatalf("with a foreign /proc, this process is %q, want cannot tell", got)
	}
}

// TestStoppedHolderOutOfSightReclaimed: a holder in a PID namespace of its own, out of sight of
// a process in a sibling namespace (as of a process on another host), whose claim is re-run
// safe, is SIGSTOPped past its lease. The next attempt, from that sibling, takes the claim
// over. After SIGCONT the old holder can record nothing over it, while the new holder runs the
// effect or after it committed: heartbeat, abort, release and commit are each refused with
// lease_lost, duplicates (from this namespace) replay the new holder's cert, and the old
// holder's late commit is kept in the audit trail. (This process, the namespaces' parent,
// sees the stopped holder alive: TestStoppedHolderFencedThenHealed.)
func TestStoppedHolderOutOfSightReclaimed(t *testing.T) {
	unshare := needUnshare(t)
	path := filepath.Join(t.TempDir(), "ledger.db")
	const lease = 800 * time.Millisecond
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{LeaseTTL: lease})
	own := []string{unshare, "-p", "--fork", "--mount-proc", "--"}

	h := startHolder(t, path, "stopped:reclaimed", lease, true, nil, own...)
	// The holder is unshare's child; stop that process, not unshare.
	holder := unshareChild(t, h.cmd.Process.Pid)
	t.Cleanup(func() { _ = syscall.Kill(holder, syscall.SIGCONT) }) // before unshare is killed
	if err := syscall.Kill(holder, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, holder, 'T')
	time.Sleep(2 * lease)

	// The next attempt, in a sibling namespace: it claims (startHolder waits for "claimed").
	r := startHolder(t, path, "stopped:reclaimed", lease, true, nil, own...)
	if got := r.say("judge " + h.owner); got != "judged cannot tell" {
		t.Fatalf("the reclaimer judges the stopped holder %q, want cannot tell (out of sight)", got)
	}
	if kinds := strings.Join(eventKinds(t, eng, "stopped:reclaimed"), ","); !strings.HasPrefix(kinds, "reclaim") {
		t.Fatalf("audit trail %s after the sibling's attempt, want the reclaim", kinds)
	}
	if err := syscall.Kill(holder, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Woken while the new holder runs the effect, and after it recorded its result.
	for _, cmd := range []string{"heartbeat", "commit"} {
		if got := h.say(cmd); got != "refused "+fence.CodeLeaseLost {
			t.Fatalf("the resumed holder's %s while the claim is taken over: %s; want refused %s", cmd, got, fence.CodeLeaseLost)
		}
	}
	got := r.say("commit")
	hash, ok := strings.CutPrefix(got, "committed ")
	if !ok {
		t.Fatalf("the new holder's commit: %s", got)
	}
	for _, cmd := range []string{"heartbeat", "abort", "release", "commit"} {
		if got := h.say(cmd); got != "refused "+fence.CodeLeaseLost {
			t.Fatalf("the resumed holder's %s after the new holder's commit: %s; want refused %s", cmd, got, fence.CodeLeaseLost)
		}
	}
	dup, err := eng.Prepare(ctx, holderReq("stopped:reclaimed"))
	if err != nil || dup.Fresh() || dup.Cert.Hash != hash {
		t.Fatalf("a duplicate after the old holder woke: %+v %v; want the reclaimer's cert %s", dup, err, hash)
	}
	if kinds := strings.Join(eventKinds(t, eng, "stopped:reclaimed"), ","); !strings.HasPrefix(kinds, "reclaim,") || !strings.Contains(kinds, fence.EventLateResult) {
		t.Fatalf("audit trail %s, want the reclaim and the old holder's late result", kinds)
	}
}

// TestHolderWithAForeignProcIsJudgedByNobody: a holder in its own PID namespace whose /proc
// is the parent namespace's (unshare -p --fork without --mount-proc) cannot read its own start
// time there: /proc/1 is the parent namespace's init, not itself. It judges nobody, and what it
// records must be judged by nobody either. Before, it recorded that other process's start, so
// a process of its own namespace with a /proc of its own (here: entered with nsenter, proc
// mounted by unshare -m --mount-proc) found the holder's pid running with another start time
// and judged it dead (pid reused) while it ran: its claim unknown at once, or taken over and
// run again. Now it records start 0 (cannot tell): its claim waits for its lease.
func TestHolderWithAForeignProcIsJudgedByNobody(t *testing.T) {
	unshare := needUnshare(t)
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("skipped: the nsenter command is not installed")
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	const lease = time.Hour
	h := startHolder(t, path, "foreign-proc:1", lease, true, nil, unshare, "-p", "--fork", "--")
	holder := unshareChild(t, h.cmd.Process.Pid)
	// A judge in the holder's PID namespace, with a /proc of that namespace.
	j := startHolder(t, path, "foreign-proc:judge", lease, false, nil,
		nsenter, "-t", strconv.Itoa(holder), "--pid", "--", unshare, "-m", "--mount-proc", "--")
	if got := j.say("judge " + j.owner); got != "judged alive" {
		t.Fatalf("the judge of the holder's namespace judges itself %q, want alive: its /proc is not sound", got)
	}
	if got := j.say("judge " + h.owner); got != "judged cannot tell" {
		t.Fatalf("the running holder %s, judged in its own namespace: %q, want cannot tell", h.owner, got)
	}
}
