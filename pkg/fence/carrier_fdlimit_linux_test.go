package fence

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// envJudgeShortOfFiles makes this test binary, started by
// TestCarrierJudgedShortOfFilesIsNotDead, judge the owner string it names with a single file
// descriptor left to open: it prints what OwnerLiveness makes of it.
const envJudgeShortOfFiles = "EFFECTFENCE_TEST_JUDGE_SHORT_OF_FILES"

// envThreadsShortOfFiles makes this test binary, started by
// TestThreadsUnreadIsNotNone, count its own threads with no file descriptor left to open: it
// prints what threads answers.
const envThreadsShortOfFiles = "EFFECTFENCE_TEST_THREADS_SHORT_OF_FILES"

func init() {
	owner := os.Getenv(envJudgeShortOfFiles)
	counting := os.Getenv(envThreadsShortOfFiles) != ""
	if owner == "" && !counting {
		return
	}
	whereAmI()
	// Open and close a file first, so that whatever the runtime opens once (its poller) is
	// open before the descriptors are filled.
	if f, err := os.Open("/proc/self/stat"); err == nil {
		f.Close()
	}
	// Fill every descriptor up to the limit, then give one back.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("error:", err)
		os.Exit(0)
	}
	lim.Cur = 64
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("error:", err)
		os.Exit(0)
	}
	var held []int
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		held = append(held, fd)
	}
	if counting {
		n, unseen := threads(os.Getpid())
		fmt.Println(n, unseen)
		os.Exit(0)
	}
	if len(held) == 0 {
		fmt.Println("error: no descriptor to give back")
		os.Exit(0)
	}
	syscall.Close(held[len(held)-1])
	fmt.Println(OwnerLiveness(owner))
	os.Exit(0)
}

// A judge that cannot read a process's /proc entry for want of a file descriptor (EMFILE: a
// gateway at its descriptor limit) has not seen that process gone. A gone holder's carrier
// whose leader is gone and whose member runs was judged dead by such a judge: every member's
// stat read failed and was taken for a process of another group, so the group was "seen
// empty", remembered as ended for good, and its claim taken over when re-run safe (or
// cleared by an operator) while the member still ran the call. Dead is said only when sure.
func TestCarrierJudgedShortOfFilesIsNotDead(t *testing.T) {
	t.Parallel()
	me := whereAmI()
	if !me.sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	holder := goneHolder(t, me)
	leader, _, end := startGroup(t)
	owner := withCarrier(holder, GroupCarrier(leader.Process.Pid))
	_ = end.Close()
	_ = leader.Wait()
	if got := OwnerLiveness(owner); got != Alive {
		t.Fatalf("a gone holder whose carrier's member runs: %s, want alive", got)
	}
	judge := exec.Command(os.Args[0], "-test.run=^$")
	judge.Env = append(os.Environ(), envJudgeShortOfFiles+"="+owner)
	out, err := judge.Output()
	if err != nil {
		t.Fatalf("the judge: %v", err)
	}
	got := strings.TrimSpace(string(out))
	if strings.HasPrefix(got, "error:") {
		t.Skipf("skipped: the judge could not limit its descriptors: %s", got)
	}
	if got == Dead.String() {
		t.Fatalf("judged with one descriptor to spare, a gone holder whose carrier's member runs: %s, want alive or cannot tell", got)
	}
}

// A process whose stat reads Z (its main thread exited) runs while threads are left, which
// /proc/PID/status counts. A judge that could read the stat but not the status (its
// descriptors ran out between the two reads) took the count for 0, and the process for ended:
// a carrier member, or a holder, running the call was judged dead (the same class as
// TestCarrierJudgedShortOfFilesIsNotDead). threads says it could not count.
func TestThreadsUnreadIsNotNone(t *testing.T) {
	t.Parallel()
	if n, unseen := threads(os.Getpid()); n < 1 || unseen {
		t.Fatalf("this process's threads: %d (unseen %v)", n, unseen)
	}
	counter := exec.Command(os.Args[0], "-test.run=^$")
	counter.Env = append(os.Environ(), envThreadsShortOfFiles+"=1")
	out, err := counter.Output()
	if err != nil {
		t.Fatalf("the counter: %v", err)
	}
	got := strings.TrimSpace(string(out))
	if strings.HasPrefix(got, "error:") {
		t.Skipf("skipped: the counter could not limit its descriptors: %s", got)
	}
	if got != "0 true" {
		t.Fatalf("threads with no descriptor left: %q, want 0 and unseen", got)
	}
}
