package fence

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envLeaderExits makes this test binary, started by TestRunningProcessWithoutItsLeaderIsAlive,
// a process whose main thread exits while its other threads go on working.
const envLeaderExits = "EFFECTFENCE_TEST_LEADER_EXITS"

// init runs on the main thread (the runtime keeps the main goroutine there until main
// starts), so exiting the thread here ends the leader only: the process lives on in its
// other threads, and its /proc/PID/stat reads state Z, as a C program's after
// pthread_exit in main does.
func init() {
	if os.Getenv(envLeaderExits) == "" {
		return
	}
	go func() { // the effect, still running
		for {
			time.Sleep(50 * time.Millisecond)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	syscall.Syscall(syscall.SYS_EXIT, 0, 0, 0)
}

// envOwnerRole makes this test binary, started by TestMachineIDTellsClonesApart, a process of
// another machine identity (MachineIDEnv): "hold" prints its owner string and sleeps; "judge
// OWNER" prints what it makes of OWNER.
const envOwnerRole = "EFFECTFENCE_TEST_OWNER_ROLE"

func init() {
	role, arg, _ := strings.Cut(os.Getenv(envOwnerRole), " ")
	switch role {
	case "hold":
		fmt.Println(LocalOwner())
		time.Sleep(time.Minute)
		os.Exit(0)
	case "judge":
		fmt.Println(OwnerLiveness(arg))
		os.Exit(0)
	}
}

// TestOwnerLivenessRules holds the table of docs/RELIABILITY.md ("Who holds a claim") against
// real processes: a running child, the same child stopped, a zombie and a reaped one, and
// owner strings that differ from a live one only where the table says they must (start time,
// boot id, PID namespace, host name, the older three-part form).
func TestOwnerLivenessRules(t *testing.T) {
	t.Parallel()
	me := whereAmI()
	if !me.sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Skipf("skipped: no sleep command: %v", err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	pid := child.Process.Pid
	start, state := procStat(pid)
	if start == 0 || state == 0 {
		t.Fatalf("cannot read /proc/%d/stat", pid)
	}
	owner := func(host string, pid int, start uint64, boot, ns string) string {
		return fmt.Sprintf("%s/%d/%d/%s/%s", host, pid, start, boot, ns)
	}
	live := owner("elsewhere", pid, start, me.boot, me.pidns)
	otherBoot := strings.Repeat("0", 8) + me.boot[8:]
	if otherBoot == me.boot {
		otherBoot = strings.Repeat("1", 8) + me.boot[8:]
	}
	for _, c := range []struct {
		what  string
		owner string
		want  Liveness
	}{
		{"this process", me.owner, Alive},
		{"a running process, recorded under another host name", live, Alive},
		{"a running process with another start time (its pid reused)", owner("h", pid, start+1, me.boot, me.pidns), Dead},
		{"another boot", owner("h", pid, start+1, otherBoot, me.pidns), CannotTell},
		{"another PID namespace", owner("h", pid, start+1, me.boot, "4026531000"), CannotTell},
		{"the older form host/pid/start", fmt.Sprintf("h/%d/%d", pid, start+1), CannotTell},
		{"no start time", owner("h", pid, 0, me.boot, me.pidns), CannotTell},
		{"not an owner", "garbage", CannotTell},
	} {
		if got := OwnerLiveness(c.owner); got != c.want {
			t.Errorf("%s (%s): %s, want %s", c.what, c.owner, got, c.want)
		}
	}

	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitProcState(t, pid, 'T')
	if got := OwnerLiveness(live); got != Alive {
		t.Errorf("a stopped process: %s, want alive", got)
	}
	_ = child.Process.Signal(syscall.SIGCONT)

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitProcState(t, pid, 'Z') // killed, not reaped
	if got := OwnerLiveness(live); got != Dead {
		t.Errorf("a zombie: %s, want dead", got)
	}
	_ = child.Wait()
	if got := OwnerLiveness(live); got != Dead {
		t.Errorf("a killed and reaped process: %s, want dead", got)
	}
	// Gone, but recorded in a form or a place this process cannot judge: never called dead.
	for _, o := range []string{
		fmt.Sprintf("h/%d/%d", pid, start),
		owner("h", pid, start, otherBoot, me.pidns),
		owner("h", pid, start, me.boot, "4026531000"),
	} {
		if got := OwnerLiveness(o); got != CannotTell {
			t.Errorf("a gone process recorded as %s: %s, want cannot tell", o, got)
		}
	}
}

func waitProcState(t *testing.T, pid int, want byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, s := procStat(pid); s == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never reached state %c", pid, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestParseBootOffset: the boottime line of /proc/self/timens_offsets in clock ticks, known only
// when it is whole ticks and the file is what the kernel writes.
func TestParseBootOffset(t *testing.T) {
	for _, c := range []struct {
		text  string
		ticks int64
		known bool
	}{
		{"monotonic           0         0\nboottime            0         0\n", 0, true},
		{"monotonic           5         0\nboottime        86400         0\n", 8640000, true},
		{"monotonic 0 0\nboottime -100 0\n", -10000, true},
		{"boottime 1 10000000\n", 101, true},
		{"1 0 0\n7 86400 0\n", 8640000, true}, // clock ids, not names
		{"boottime 1 5000000\n", 0, false},    // half a tick
		{"boottime 1 1000000000\n", 0, false},
		{"boottime 1 -1\n", 0, false},
		{"boottime x 0\n", 0, false},
		{"boottime 1\n", 0, false},
		{"boottime 1 0\nboottime 2 0\n", 0, false},
		{"monotonic 0 0\n", 0, false}, // no boottime line
		{"", 0, false},
		{"boottime 92233720368547758 0\n", 0, false}, // overflows in ticks
	} {
		ticks, known := parseBootOffset(c.text)
		if ticks != c.ticks || known != c.known {
			t.Errorf("parseBootOffset(%q) = %d, %v; want %d, %v", c.text, ticks, known, c.ticks, c.known)
		}
	}
}

// A process whose main thread exited while its other threads run (a C holder calling
// pthread_exit in main, a Go one leaving the main thread by a raw exit) reads state Z in
// /proc/PID/stat, like a zombie, though it runs: before, it was judged dead, so its claim
// went unknown at once, or was taken over and run again while it still ran. A zombie has no
// thread left but its leader (Threads: 1 in /proc/PID/status); this one has more: alive.
func TestRunningProcessWithoutItsLeaderIsAlive(t *testing.T) {
	t.Parallel()
	me := whereAmI()
	if !me.sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envLeaderExits+"=1")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	pid := child.Process.Pid
	waitProcState(t, pid, 'Z')
	start, _ := procStat(pid)
	owner := fmt.Sprintf("h/%d/%d/%s/%s", pid, start, me.boot, me.pidns)
	if got := OwnerLiveness(owner); got != Alive {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		t.Fatalf("a running process whose main thread exited: %s, want alive\n%s", got, b)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); OwnerLiveness(owner) != Dead; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the same process killed, not reaped: %s, want dead", OwnerLiveness(owner))
		}
	}
}

// Machines cloned from one snapshot share a boot id, and the initial PID namespace's inode is
// the same on every Linux kernel: a clone judged another clone's holder by its own pids, so a
// holder alive there was dead here once its pid was gone here (docs/RELIABILITY.md). With
// EFFECTFENCE_MACHINE_ID set, each clone judges only holders of its own id. Real processes
// stand in for two clones of this machine: a holder of id clone-a, then judges of ids clone-a,
// clone-b and none, while it runs and once it is gone (to clone-b, gone here is what a live
// holder on clone-a looks like: cannot tell, never dead). A holder that runs here is alive to
// all three (a judge without the id, an operator's shell say, must not take it for gone).
func TestMachineIDTellsClonesApart(t *testing.T) {
	t.Parallel()
	if !whereAmI().sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	env := func(role, machine string) []string {
		var e []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, MachineIDEnv+"=") {
				e = append(e, kv)
			}
		}
		e = append(e, envOwnerRole+"="+role)
		if machine != "" {
			e = append(e, MachineIDEnv+"="+machine)
		}
		return e
	}
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = env("hold", "clone-a")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n') // the owner string, read whole
	if err != nil {
		t.Fatal(err)
	}
	owner := strings.TrimSpace(line)
	if parts := strings.Split(owner, "/"); len(parts) != 5 || !strings.Contains(parts[3], "+") {
		t.Fatalf("the holder's owner string %q: want host/pid/start/boot+machine/pidns", owner)
	}
	judge := func(machine string) string {
		t.Helper()
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = env("judge "+owner, machine)
		b, err := c.Output()
		if err != nil {
			t.Fatalf("judge %q: %v", machine, err)
		}
		return strings.TrimSpace(string(b))
	}
	check := func(when string, want map[string]Liveness) {
		t.Helper()
		for machine, w := range want {
			if got := judge(machine); got != w.String() {
				t.Errorf("%s, judged by a process of machine id %q: %s, want %s", when, machine, got, w)
			}
		}
	}
	// A process runs at the holder's pid with its start time: alive to every judge of this
	// boot, whatever its machine id (cannot tell would let a re-run-safe claim be taken over,
	// or an operator clear it, while its holder ran).
	check("a running holder of machine id clone-a", map[string]Liveness{"clone-a": Alive, "clone-b": Alive, "": Alive})
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	check("a holder of machine id clone-a, gone", map[string]Liveness{"clone-a": Dead, "clone-b": CannotTell, "": CannotTell})
}
