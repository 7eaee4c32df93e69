package fence

import (
	"fmt"
	"syscall"
	"testing"
)

// TestCarrierLeaderGoneUncached: the judgement of a group whose leader is gone (reaped, or
// a zombie nobody reaps: a container whose PID 1 does not reap) while a member runs, without
// the carrier cache's second of "seen running" answering in its place. In
// TestCarrierKeepsAGoneHolderAlive the cache answers those looks (the first look, leader
// running, was less than a second before): it passes with groupMemberRuns always Dead.
func TestCarrierLeaderGoneUncached(t *testing.T) {
	t.Parallel()
	me := whereAmI()
	if !me.sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	for _, reap := range []bool{true, false} {
		t.Run(fmt.Sprintf("leader-reaped=%v", reap), func(t *testing.T) {
			leader, member, end := startGroup(t)
			pgid, start, ok := parseCarrier(GroupCarrier(leader.Process.Pid))
			if !ok {
				t.Fatal("no carrier")
			}
			_ = end.Close()
			if reap {
				_ = leader.Wait()
			} else {
				waitProcState(t, pgid, 'Z') // left a zombie: its number, and its group, stay taken
			}
			if got := groupLiveness(pgid, start, me); got != Alive {
				t.Fatalf("the leader gone, a member running: %s, want alive", got)
			}
			if err := syscall.Kill(member, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitProcState(t, member, 'T')
			if got := groupLiveness(pgid, start, me); got != Alive {
				t.Fatalf("the leader gone, a member stopped: %s, want alive", got)
			}
			if err := syscall.Kill(member, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { _, s := procStat(member); return s == 0 || s == 'Z' })
			if got := groupLiveness(pgid, start, me); got != Dead {
				t.Fatalf("the leader gone, its member killed: %s, want dead", got)
			}
		})
	}
}
