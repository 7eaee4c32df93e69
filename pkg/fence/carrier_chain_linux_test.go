package fence

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envChainReaper makes this test binary, started by TestCarrierChainNeverJudgedEnded, the
// reaper of a chain of processes (PR_SET_CHILD_SUBREAPER): it starts the chain's leader, the
// script named by the variable, in a process group of its own, prints its pid, lets it go on
// when a line comes on stdin, and reaps every member that exits (orphans are reparented to it)
// until none is left.
const envChainReaper = "EFFECTFENCE_TEST_CHAIN_REAPER"

func init() {
	script := os.Getenv(envChainReaper)
	if script == "" {
		return
	}
	const prSetChildSubreaper = 36
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		fmt.Println("no subreaper:", e)
		os.Exit(2)
	}
	// The chain is bounded: 20000 members, and none once the script's directory is gone.
	leader := exec.Command("sh", "-c", `read x; sh "$0" 20000 &`, script)
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := leader.StdinPipe()
	if err == nil {
		err = leader.Start()
	}
	if err != nil {
		fmt.Println("no leader:", err)
		os.Exit(2)
	}
	fmt.Println(leader.Process.Pid)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = in.Close()
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); err == syscall.ECHILD {
			os.Exit(0)
		}
	}
}

// TestCarrierChainNeverJudgedEnded judges, again and again, a carrier group whose leader is
// gone and whose only running member forks its successor and exits at once: the group has a
// running member at every instant, yet a look at /proc that lists the pids before it reads
// each one's stat finds the member it listed exited and does not list the successor, born
// after the listing. Dead must never be the answer: it is remembered for good (carrierCache),
// and an operator's clear then goes through while the chain may still finish the effect. The
// processes started before the chain are read before it, as a host's other processes are.
func TestCarrierChainNeverJudgedEnded(t *testing.T) {
	me := whereAmI()
	if !me.sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skipf("skipped: no sh: %v", err)
	}
	for range 150 {
		s := exec.Command("sleep", "600")
		if err := s.Start(); err != nil {
			t.Skipf("skipped: no sleep: %v", err)
		}
		t.Cleanup(func() { _ = s.Process.Kill(); _ = s.Wait() })
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "chain.sh")
	chain := fmt.Sprintf("[ \"$1\" -gt 0 ] && [ -d %q ] && sh \"$0\" $(($1 - 1)) &\n", dir)
	if err := os.WriteFile(script, []byte(chain), 0o600); err != nil {
		t.Fatal(err)
	}
	reaper := exec.Command(os.Args[0], "-test.run=^$")
	reaper.Env = append(os.Environ(), envChainReaper+"="+script)
	reaper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := reaper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := reaper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := reaper.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	pgid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		_ = reaper.Process.Kill()
		_ = reaper.Wait()
		t.Skipf("skipped: %s", line)
	}
	t.Cleanup(func() {
		_ = os.RemoveAll(dir)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = in.Close()
		_ = reaper.Wait()
	})
	carrier := GroupCarrier(pgid)
	_, start, ok := parseCarrier(carrier)
	if !ok {
		t.Fatalf("no carrier for group %d: %q", pgid, carrier)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for leaderOf(pgid, start, me) != leaderGone {
		if time.Now().After(deadline) {
			t.Fatal("the group's leader does not end")
		}
		time.Sleep(time.Millisecond)
	}
	n := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); n++ {
		if l := groupLiveness(pgid, start, me); l != Alive {
			empty, _ := groupProbe(pgid)
			t.Fatalf("judgement %d of a group that has a running member at every instant: %v (group empty by kill(2): %v)", n+1, l, empty)
		}
	}
	if empty, _ := groupProbe(pgid); empty {
		t.Fatal("the chain ended while judged")
	}
	t.Logf("%d judgements, all alive", n)
}
