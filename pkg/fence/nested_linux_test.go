package fence

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestHolderInAChildPIDNamespaceIsSeenFromAbove: a holder in a PID namespace of its own (a
// container on this host: unshare --pid --fork --mount-proc), judged by this process, whose
// namespace is the holder's parent, and by a process in a sibling namespace. From here the
// holder is found under this /proc's pid (its ns/pid link, NSpid) and judged alive while it
// runs or is stopped; a zombie, a wrong start time or an unknown pid is "cannot tell", never
// dead (what is not found here may live where this process cannot see). From the sibling it
// is out of sight: "cannot tell". Before 2026-12-07 every holder of another PID namespace was
// "cannot tell", so a process on the host let a lapsed re-run-safe claim of a stopped
// container be taken over, and an operator clear it without --force, while it ran. Also in a
// time namespace whose boottime is a day ahead: the holder records its start in the initial
// namespace's ticks, which is what this process reads.
func TestHolderInAChildPIDNamespaceIsSeenFromAbove(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if os.Geteuid() != 0 || err != nil {
		t.Skip("skipped: needs root and the unshare command to make PID namespaces")
	}
	if !whereAmI().sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"pid namespace", nil},
		{"pid and time namespaces", []string{"--time", "--boottime", "86400"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			under := append([]string{"--pid", "--fork", "--mount-proc"}, tc.extra...)
			up, owner := startNestedHolder(t, unshare, under)
			parts := strings.Split(owner, "/")
			if len(parts) != 5 || parts[4] == whereAmI().pidns || parts[1] != "1" || parts[2] == "0" {
				t.Fatalf("the holder's owner string %q: want pid 1 of another PID namespace, with a start time", owner)
			}
			holder := childOf(t, up)

			if got := OwnerLiveness(owner); got != Alive {
				t.Fatalf("a running holder in a child PID namespace, judged from its parent: %s, want alive", got)
			}
			if got := siblingJudge(t, unshare, owner); got != CannotTell.String() {
				t.Fatalf("the same holder judged from a sibling PID namespace: %s, want cannot tell", got)
			}
			wrong := func(i int, v string) string {
				p := append([]string(nil), parts...)
				p[i] = v
				return strings.Join(p, "/")
			}
			start, _ := strconv.ParseUint(parts[2], 10, 64)
			for what, o := range map[string]string{
				"another start time":       wrong(2, strconv.FormatUint(start+1, 10)),
				"a pid nobody has there":   wrong(1, "4000000"),
				"another namespace":        wrong(4, "4026531000"),
				"a namespace not a number": wrong(4, "4026531836]"),
				"another boot":             wrong(3, "00000000-0000-0000-0000-000000000000"),
			} {
				if got := OwnerLiveness(o); got != CannotTell {
					t.Errorf("the holder's owner string with %s (%s): %s, want cannot tell", what, o, got)
				}
			}

			if err := syscall.Kill(holder, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitProcState(t, holder, 'T')
			if got := OwnerLiveness(owner); got != Alive {
				t.Fatalf("the holder stopped (SIGSTOP): %s, want alive", got)
			}
			// A zombie: its parent (unshare) stopped so that it is not reaped, then the holder
			// killed.
			if err := syscall.Kill(up, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitProcState(t, up, 'T')
			_ = syscall.Kill(holder, syscall.SIGKILL)
			waitProcState(t, holder, 'Z')
			// Its main thread reads Z a moment before its other threads are gone; until then it
			// still runs.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if n, _ := threads(holder); n <= 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the killed holder (pid %d) kept its threads", holder)
				}
			}
			if got := OwnerLiveness(owner); got != CannotTell {
				t.Fatalf("the holder killed, a zombie not reaped: %s, want cannot tell", got)
			}
			_ = syscall.Kill(up, syscall.SIGCONT)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if _, s := procStat(holder); s == 0 {
					break
				}
				if got := OwnerLiveness(owner); got == Alive {
					t.Fatalf("the killed holder while it is reaped: %s", got)
				}
				if time.Now().After(deadline) {
					t.Fatalf("the killed holder (pid %d) was not reaped by unshare", holder)
				}
			}
			if got := OwnerLiveness(owner); got != CannotTell {
				t.Fatalf("the holder killed and reaped: %s, want cannot tell (from here gone looks like out of sight)", got)
			}
			// A namespace's inode is reused once it ends. A holder in a new namespace that has
			// the inode just read, judged within the second that reading is kept, was "cannot
			// tell" here before that was allowed for (found with -count).
			for try := 1; ; try++ {
				nup, next := startNestedHolder(t, unshare, under)
				reused := strings.Split(next, "/")[4] == parts[4]
				if reused || try == 30 {
					got := OwnerLiveness(next)
					childOf(t, nup) // killed at cleanup: killing unshare leaves it running
					if got != Alive {
						t.Fatalf("a holder %s in a new namespace (the first was %s), judged at once: %s, want alive", next, owner, got)
					}
					t.Logf("the namespace's inode reused: %v, after %d tries", reused, try)
					break
				}
				_ = syscall.Kill(childOf(t, nup), syscall.SIGKILL)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// startNestedHolder starts this test binary as a holder (envOwnerRole "hold") under unshare
// with the given options, and returns unshare's pid and the holder's owner string.
func startNestedHolder(t *testing.T, unshare string, under []string) (int, string) {
	t.Helper()
	return holdUnder(t, os.Args[0], append(append([]string{unshare}, under...), "--")...)
}

// childOf is the one child of process up (the holder unshare forked), killed at cleanup: the
// holder is the namespace's init, so the namespace ends with it.
func childOf(t *testing.T, up int) int {
	t.Helper()
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", up, up))
	pid, err2 := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil || err2 != nil {
		t.Fatalf("the process under unshare (pid %d): children %q: %v %v", up, kids, err, err2)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// siblingJudge judges owner from a PID namespace of its own beside the holder's (both children
// of this one), with a /proc of that namespace.
func siblingJudge(t *testing.T, unshare, owner string) string {
	t.Helper()
	c := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--", os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), envOwnerRole+"=judge "+owner)
	b, err := c.Output()
	if err != nil {
		t.Fatalf("the judge in a sibling namespace: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// TestOwnerStartingLaterIsNotSoughtInProc: an owner of this boot in another PID namespace
// whose start time is after now names no process (an owner made up, or from a clone of this
// machine that has run longer). Each judgement of it read /proc anew, since a holder that
// started after the last reading may be missing from it; now it is "cannot tell" without a
// reading. Not parallel: the count of readings is the package's. Each run names a namespace
// of its own: a reading of 4026531000 kept from another test, or from this one's earlier run
// under -count, would answer the last owner with no reading at all.
func TestOwnerStartingLaterIsNotSoughtInProc(t *testing.T) {
	ns := fmt.Sprint(4026530000 + laterRuns.Add(1))
	me := whereAmI()
	now, ok := bootTicks(me)
	if !me.sound || !ok {
		t.Skip("skipped: this process's /proc is not its own PID namespace's, or its clock cannot be read")
	}
	// Half a second ahead, not 2 ticks: at CI's load the 20 judgements took longer than 2 ticks
	// once, and the owner had started by then (each was then looked for).
	for _, later := range []uint64{clockTicks / 2, clockTicks * 3600} {
		if now, ok = bootTicks(me); !ok {
			t.Fatal("the clock cannot be read")
		}
		owner := fmt.Sprintf("h/1/%d/%s/%s", now+later, me.boot, ns)
		before := nestedReadings.Load()
		for i := 0; i < 20; i++ {
			if got := OwnerLiveness(owner); got != CannotTell {
				t.Fatalf("an owner starting %d ticks from now: %s, want cannot tell", later, got)
			}
		}
		if n := nestedReadings.Load() - before; n > 0 {
			t.Errorf("20 judgements of an owner starting %d ticks from now read /proc %d times, want none", later, n)
		}
	}
	// One that started before now is looked for: one reading, kept for the others.
	owner := fmt.Sprintf("h/1/%d/%s/%s", now-nestedListLag-10, me.boot, ns)
	before := nestedReadings.Load()
	for i := 0; i < 20; i++ {
		if got := OwnerLiveness(owner); got != CannotTell {
			t.Fatalf("an owner of a namespace nobody has: %s, want cannot tell", got)
		}
	}
	if n := nestedReadings.Load() - before; n < 1 || n > 2 {
		t.Errorf("20 judgements of an owner that started before now read /proc %d times, want 1 (2 if a second passed)", n)
	}
}

// laterRuns numbers TestOwnerStartingLaterIsNotSoughtInProc's runs (-count), for a namespace
// no other judgement has read.
var laterRuns atomic.Uint64

// BenchmarkJudgeContainerHolder: what judging a holder in a child PID namespace costs this
// process: "kept", a judgement answered from a kept reading (the holder's stat and status read
// afresh); "reading", a reading of /proc each time (the cost a miss of a holder started in the
// last second pays, and the first judgement of a namespace), with the processes /proc lists.
func BenchmarkJudgeContainerHolder(b *testing.B) {
	unshare, err := exec.LookPath("unshare")
	if os.Geteuid() != 0 || err != nil || !whereAmI().sound {
		b.Skip("skipped: needs root, unshare and a /proc of this PID namespace")
	}
	c := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--", os.Args[0], "-test.run=^$", "-test.bench=^$")
	c.Env = append(os.Environ(), envOwnerRole+"=hold")
	out, err := c.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	var line [512]byte
	n, err := out.Read(line[:])
	if err != nil {
		b.Fatal(err)
	}
	owner := strings.TrimSpace(string(line[:n]))
	parts := strings.Split(owner, "/")
	me := whereAmI()
	names, _ := os.ReadDir("/proc")
	b.Run("kept", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if OwnerLiveness(owner) != Alive {
				b.Fatal("not alive")
			}
		}
	})
	b.Run("reading", func(b *testing.B) {
		b.ReportMetric(float64(len(names)), "proc-entries")
		for i := 0; i < b.N; i++ {
			if s, ok := scanNamespace(parts[4], me); !ok || len(s.pids) == 0 {
				b.Fatal("the holder's namespace not read")
			}
		}
	})
}

// envCarrierHolder makes this test binary, started by TestCarrierInAChildPIDNamespace, a holder
// whose call runs in a process group of its own (a sleep, as the node under npx): it prints its
// owner string with that group as its carrier, then sleeps.
const envCarrierHolder = "EFFECTFENCE_TEST_CARRIER_HOLDER"

func init() {
	if os.Getenv(envCarrierHolder) == "" {
		return
	}
	group := exec.Command("sleep", "120")
	group.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := group.Start(); err != nil {
		fmt.Println("no sleep:", err)
		os.Exit(1)
	}
	carrier := GroupCarrier(group.Process.Pid)
	if carrier == "" {
		fmt.Println("no carrier")
		os.Exit(1)
	}
	fmt.Println(withCarrier(LocalOwner(), carrier))
	time.Sleep(2 * time.Minute)
	os.Exit(0)
}

// TestCarrierInAChildPIDNamespace: a holder in a container on this host (a PID namespace of
// its own, under a shell as its init: the holder is not the namespace's pid 1), whose call runs
// in a process group it started (its carrier), is killed with SIGKILL while that group runs,
// as a wrap whose server's node finishes the call. From this process, the namespace's parent,
// the claim is alive while the group runs, and CarrierRuns names the group by its number here
// (what `kill -KILL -- -<pgid>` on this host needs); once the group has ended, "cannot tell"
// (never dead). A sibling namespace cannot tell either way. Before 2026-12-07 the holder's
// group was not looked for in its namespace: "cannot tell" as soon as the holder was gone, and
// a re-run-safe claim past its lease was taken over while the group still ran the call.
func TestCarrierInAChildPIDNamespace(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if os.Geteuid() != 0 || err != nil || !whereAmI().sound {
		t.Skip("skipped: needs root, unshare and a /proc of this PID namespace")
	}
	c := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--", "sh", "-c", `"$0" -test.run='^$'; exec sleep 120`, os.Args[0])
	c.Env = append(os.Environ(), envCarrierHolder+"=1")
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	owner := strings.TrimSpace(line)
	if err != nil || !strings.Contains(owner, "+g") {
		t.Fatalf("the holder printed %q (%v), want its owner string with a carrier", owner, err)
	}
	sh := childOf(t, c.Process.Pid) // the namespace's init, killed at cleanup: the namespace ends
	holder := childOf(t, sh)
	if got := OwnerLiveness(owner); got != Alive {
		t.Fatalf("the running holder %s: %s, want alive", owner, got)
	}
	if g, running := CarrierRuns(owner); running {
		t.Fatalf("CarrierRuns with the holder running: group %d; want none (the holder answers for its call)", g)
	}
	if err := syscall.Kill(holder, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, s := procStat(holder); s == 0 {
			break // reaped by the shell
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed holder (pid %d) was not reaped", holder)
		}
	}
	if got := OwnerLiveness(owner); got != Alive {
		t.Fatalf("the holder killed, its carrier running: %s, want alive", got)
	}
	g, gone := GoneHolderCarrier(owner)
	if !gone {
		t.Fatalf("GoneHolderCarrier: %d %v; want the group that runs", g, gone)
	}
	if _, _, pgrp := procStatGroup(g); pgrp != g {
		t.Fatalf("CarrierRuns named group %d, which is no group here (pid %d's group is %d)", g, g, pgrp)
	}
	if got := siblingJudge(t, unshare, owner); got != CannotTell.String() {
		t.Fatalf("the same claim judged from a sibling PID namespace: %s, want cannot tell", got)
	}
	if err := syscall.Kill(-g, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -KILL -- -%d: %v", g, err)
	}
	for deadline := time.Now().Add(10 * time.Second); OwnerLiveness(owner) != CannotTell; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the group killed: %s, want cannot tell", OwnerLiveness(owner))
		}
	}
	if g, running := CarrierRuns(owner); running {
		t.Fatalf("CarrierRuns once the group was killed: %d", g)
	}
}
