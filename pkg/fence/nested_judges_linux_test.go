package fence

import (
	"bufio"
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
)

// envLineJudge makes this test binary a judge that reads owner strings on its standard input,
// one a line, and prints what it makes of each (OwnerLiveness), one a line; the line "offset"
// prints the boottime offset of its time namespace in ticks (whereAmI). One judge process
// keeps its readings of /proc from one judgement to the next, as a serve process does.
const envLineJudge = "EFFECTFENCE_TEST_LINE_JUDGE"

func init() {
	if os.Getenv(envLineJudge) == "" {
		return
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "offset" {
			fmt.Println(whereAmI().offset)
			continue
		}
		fmt.Println(OwnerLiveness(in.Text()))
	}
	os.Exit(0)
}

// lineJudge is a judge process (envLineJudge) run under a command prefix (setpriv, unshare).
type lineJudge struct {
	in  io.WriteCloser
	out *bufio.Reader
}

func startLineJudge(t *testing.T, exe string, prefix ...string) *lineJudge {
	t.Helper()
	c := exec.Command(prefix[0], append(append(append([]string(nil), prefix[1:]...), exe), "-test.run=^$")...)
	c.Env = append(os.Environ(), envLineJudge+"=1")
	c.Stderr = os.Stderr
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(); _ = c.Process.Kill(); _ = c.Wait() })
	return &lineJudge{in, bufio.NewReader(out)}
}

func (j *lineJudge) ask(t *testing.T, line string) string {
	t.Helper()
	if _, err := fmt.Fprintln(j.in, line); err != nil {
		t.Fatalf("the judge process: %v", err)
	}
	got, err := j.out.ReadString('\n')
	if err != nil {
		t.Fatalf("the judge process answered nothing to %q: %v", line, err)
	}
	return strings.TrimSpace(got)
}

// holdUnder starts exe as a holder (envOwnerRole "hold") under the command prefix and returns
// the prefix process's pid and the holder's owner string.
func holdUnder(t *testing.T, exe string, prefix ...string) (int, string) {
	t.Helper()
	c := exec.Command(prefix[0], append(append(append([]string(nil), prefix[1:]...), exe), "-test.run=^$")...)
	c.Env = append(os.Environ(), envOwnerRole+"=hold")
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(c.Process.Pid, syscall.SIGCONT) // a test may have stopped it
		_ = c.Process.Kill()
		_ = c.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the holder under %v printed no owner string: %v", prefix, err)
	}
	return c.Process.Pid, strings.TrimSpace(line)
}

// TestHolderInAChildPIDNamespaceJudgedByAnotherUser: the kernel shows a process's
// /proc/PID/ns/pid only to a judge that may trace it (ptrace read access: one with
// CAP_SYS_PTRACE, or one of the process's user with every capability it has), so a
// container's holder is in sight of the host's processes that may read it, and of no other.
// A holder in a root container (unshare --pid) judged from this namespace by a process of
// another user (setpriv to nobody), with this /proc or one mounted hidepid=2, or by root
// without CAP_SYS_PTRACE (a service's CapabilityBoundingSet): "cannot tell", never dead, the
// judge not failing; a holder that is nobody's own (a user namespace of its, unshare --user
// --map-root-user) is alive to nobody, hidepid or not, and to root. Before
// 2026-12-07 docs/serve.md, ledger.md and gateway.md said a container's claims were in sight
// of the host's processes, without the condition: a `ledger clear` run on the host by another
// user than root (a PostgreSQL ledger) clears a root container's claim without --force while
// its holder runs.
func TestHolderInAChildPIDNamespaceJudgedByAnotherUser(t *testing.T) {
	t.Parallel()
	unshare, err1 := exec.LookPath("unshare")
	setpriv, err2 := exec.LookPath("setpriv")
	if os.Geteuid() != 0 || err1 != nil || err2 != nil {
		t.Skip("skipped: needs root, unshare and setpriv to make namespaces and judge as nobody")
	}
	if !whereAmI().sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	// A copy of this binary nobody may run (the build's directory is root's alone).
	shared, err := os.MkdirTemp("", "nested-judges")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(shared, "fence.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	nobody := []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"}
	up, roots := holdUnder(t, exe, unshare, "--pid", "--fork", "--mount-proc", "--")
	childOf(t, up)
	up, nobodys := holdUnder(t, exe, append(nobody, unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--")...)
	childOf(t, up)
	for _, o := range []string{roots, nobodys} {
		if p := strings.Split(o, "/"); len(p) != 5 || p[4] == whereAmI().pidns || p[2] == "0" {
			t.Fatalf("a holder's owner string %q: want another PID namespace, with a start time", o)
		}
		if got := OwnerLiveness(o); got != Alive {
			t.Fatalf("the holder %s judged by root from its parent namespace: %s, want alive", o, got)
		}
	}
	hidepid := []string{unshare, "--mount", "--", "sh", "-c", `mount -t proc -o hidepid=2 proc /proc && exec "$@"`, "sh"}
	noPtrace := []string{setpriv, "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace", "--"}
	for _, j := range []struct {
		name       string
		prefix     []string
		nobodysToo bool // nobody's holder is in its sight
	}{
		{"nobody", nobody, true},
		{"nobody, hidepid=2 proc", append(hidepid, nobody...), true},
		{"root without CAP_SYS_PTRACE", noPtrace, false},
	} {
		judge := startLineJudge(t, exe, j.prefix...)
		if got := judge.ask(t, roots); got != CannotTell.String() {
			t.Errorf("a root container's holder %s judged by %s: %s, want cannot tell (it may not read the process's namespace)", roots, j.name, got)
		}
		want := CannotTell
		if j.nobodysToo {
			want = Alive
		}
		if got := judge.ask(t, nobodys); got != want.String() {
			t.Errorf("nobody's holder %s in a child PID namespace judged by %s: %s, want %s", nobodys, j.name, got, want)
		}
	}
}

// TestLeaderlessHolderInAChildPIDNamespaceIsAlive: a holder whose main thread exited while its
// other threads run (state Z, more than one thread: TestRunningProcessWithoutItsLeaderIsAlive)
// in a PID namespace below this one is alive from here, as it is in its own namespace; killed,
// "cannot tell", never dead. The zombie case of TestHolderInAChildPIDNamespaceIsSeenFromAbove
// held only the other half: a search that took every Z for ended passed it.
func TestLeaderlessHolderInAChildPIDNamespaceIsAlive(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if os.Geteuid() != 0 || err != nil {
		t.Skip("skipped: needs root and the unshare command to make PID namespaces")
	}
	me := whereAmI()
	if !me.sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	c := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--", os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), envLeaderExits+"=1")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	var holder int
	for deadline := time.Now().Add(10 * time.Second); holder == 0; time.Sleep(5 * time.Millisecond) {
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", c.Process.Pid, c.Process.Pid))
		holder, _ = strconv.Atoi(strings.TrimSpace(string(kids)))
		if time.Now().After(deadline) {
			t.Fatal("unshare started no holder")
		}
	}
	t.Cleanup(func() { _ = syscall.Kill(holder, syscall.SIGKILL) })
	waitProcState(t, holder, 'Z')
	if n, _ := threads(holder); n < 2 {
		t.Fatalf("the holder (pid %d) has %d threads once its main thread exited, want more", holder, n)
	}
	start, _ := procStat(holder)
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", holder))
	inner, _, ok, _ := innermostIDs(holder)
	if err != nil || !ok || start == 0 {
		t.Fatalf("the holder (pid %d): namespace %q %v, pid there %d", holder, ns, err, inner)
	}
	owner := fmt.Sprintf("h/%d/%d/%s/%s", inner, int64(start)-me.offset, me.boot, strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]"))
	if got := OwnerLiveness(owner); got != Alive {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", holder))
		t.Fatalf("a holder in a child PID namespace whose main thread exited while its threads run (%s): %s, want alive\n%s", owner, got, b)
	}
	if err := syscall.Kill(holder, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got := OwnerLiveness(owner)
		if got == Dead {
			t.Fatalf("the holder killed: dead, judged from a parent namespace (want cannot tell)")
		}
		if got == CannotTell {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder killed: still %s", got)
		}
	}
}

// TestHolderEnteringANamespaceJustReadIsAlive: a reading of /proc for a namespace is kept for a
// second, and a holder not in it is looked for again when it started after the reading began
// (nested_linux.go). A second holder entering the namespace of a first (nsenter, as `docker
// exec` does) right after a judge read it for the first is alive to that judge at once: this
// process, and a judge in a time namespace a day ahead, whose clock and start times are shifted
// by its offset (the reading's start is compared in the initial namespace's ticks). The test of
// a namespace's reused inode (TestHolderInAChildPIDNamespaceIsSeenFromAbove) held this only
// when the kernel happened to reuse the inode.
func TestHolderEnteringANamespaceJustReadIsAlive(t *testing.T) {
	t.Parallel()
	unshare, err1 := exec.LookPath("unshare")
	nsenter, err2 := exec.LookPath("nsenter")
	if os.Geteuid() != 0 || err1 != nil || err2 != nil {
		t.Skip("skipped: needs root, unshare and nsenter to make and enter PID namespaces")
	}
	if !whereAmI().sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	for _, tc := range []struct {
		name   string
		judge  func(t *testing.T) func(owner string) string
		offset int64
	}{
		{"this process", func(*testing.T) func(string) string {
			return func(o string) string { return OwnerLiveness(o).String() }
		}, whereAmI().offset},
		{"a judge a day ahead", func(t *testing.T) func(string) string {
			if err := exec.Command(unshare, "--time", "--boottime", "86400", "--fork", "--", "true").Run(); err != nil {
				t.Skipf("skipped: no time namespace for the judge (unshare --time: %v)", err)
			}
			j := startLineJudge(t, os.Args[0], unshare, "--time", "--boottime", "86400", "--fork", "--")
			if got := j.ask(t, "offset"); got != strconv.Itoa(86400*clockTicks) {
				t.Fatalf("the judge's boottime offset is %s ticks, want a day's", got)
			}
			return func(o string) string { return j.ask(t, o) }
		}, 86400 * clockTicks},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			judge := tc.judge(t)
			up, first := startNestedHolder(t, unshare, []string{"--pid", "--fork", "--mount-proc"})
			init := childOf(t, up)
			read := time.Now()
			if got := judge(first); got != Alive.String() {
				t.Fatalf("the first holder %s: %s, want alive", first, got)
			}
			up, second := holdUnder(t, os.Args[0], nsenter, "-t", strconv.Itoa(init), "--pid", "--mount", "--")
			childOf(t, up)
			if f, s := strings.Split(first, "/"), strings.Split(second, "/"); len(s) != 5 || s[4] != f[4] || s[1] == f[1] {
				t.Fatalf("the second holder %s: want another pid of the first's namespace (%s)", second, first)
			}
			got := judge(second)
			if since := time.Since(read); since >= nestedScanAge {
				t.Logf("the reading was %v old when the second holder was judged: it was read afresh", since)
			}
			if got != Alive.String() {
				t.Fatalf("a holder %s that entered the namespace of %s after the judge (offset %d ticks) read it: %s, want alive", second, first, tc.offset, got)
			}
		})
	}
}
