//go:build unix

package wrap_test

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKill9OfTheFollowingWrapRunsNothing: the wrap whose agent's task follows the first
// execution is killed with kill -9. A wrap started again on the ledger knows nothing of that
// task (tasks/get: not found, never a result of another call); the agent's duplicate through it
// follows the first execution again and ends with its result; the call ran once (only the
// first wrap ran it).
func TestKill9OfTheFollowingWrapRunsNothing(t *testing.T) {
	t.Parallel()
	needProc(t)
	fr := newFollowRig(t, "--wait", "1s")
	ctx := context.Background()
	params, firstID, dupID := fr.startFollowing(t, "killed follower")
	waitFor(t, "the duplicate's follower to start", func() bool {
		return strings.Contains(fr.second.log.String(), "follows the call in flight")
	})
	kids := childPids(fr.second.Pid())
	if err := syscall.Kill(fr.second.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-fr.second.Done()
	for _, k := range kids {
		waitFor(t, "the second wrap's server to die with it", func() bool { return !alive(k) })
	}
	third := fr.wrap("--wait", "1s")
	dq, _ := json.Marshal(map[string]string{"taskId": dupID})
	if res, err := third.Call(ctx, "tasks/get", dq); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("tasks/get of the killed wrap's task through a new wrap: %s %v", res, err)
	}
	againRes, againErr := third.Call(ctx, "tools/call", params)
	again := handleOf(t, againRes, againErr, "the duplicate through the new wrap")
	if !strings.HasPrefix(again.TaskID, "effectfence-task-") || again.Status != "working" {
		t.Fatalf("the duplicate through the new wrap: %+v", again)
	}
	close(fr.answer)
	fq, _ := json.Marshal(map[string]string{"taskId": firstID})
	awaitTaskCompleted(t, fr.first, fq, 2*time.Minute)
	if v := awaitTerminal(t, third, again.TaskID); v.Status != "completed" {
		t.Fatalf("the new wrap's following task: %+v", v)
	}
	aq, _ := json.Marshal(map[string]string{"taskId": again.TaskID})
	if res, err := third.Call(ctx, "tasks/result", aq); err != nil || !strings.Contains(string(res), "Research Report: killed follower") {
		t.Fatalf("tasks/result of the new wrap's task: %s %v", res, err)
	}
	for _, w := range []*wrapProc{fr.second, third} {
		if strings.Contains(w.log.String(), "runs as task") {
			t.Fatalf("a duplicate's wrap ran the call:\n%s", w.log.String())
		}
	}
}

// TestKill9OfTheFirstWrapEndsTheFollowingTaskUnknown: the wrap running the first execution is
// killed with kill -9 while the duplicate's task follows it. Its outcome is unknown once its
// holder is judged gone; the following task ends failed with the refusal of an unknown outcome
// (NOT executed again), and nothing runs the call a second time.
func TestKill9OfTheFirstWrapEndsTheFollowingTaskUnknown(t *testing.T) {
	t.Parallel()
	needProc(t)
	fr := newFollowRigWith(t, []string{"--lease-secs", "3"}, []string{"--wait", "1s", "--lease-secs", "3"})
	_, _, dupID := fr.startFollowing(t, "killed first")
	kids := childPids(fr.first.Pid())
	if err := syscall.Kill(fr.first.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-fr.first.Done()
	for _, k := range kids {
		waitFor(t, "the first wrap's server to die with it", func() bool { return !alive(k) })
	}
	v := awaitTerminal(t, fr.second, dupID)
	if v.Status != "failed" || !strings.Contains(v.StatusMessage, "NOT executed again") {
		t.Fatalf("the following task after kill -9 of the first wrap: %+v; wrap log:\n%s", v, fr.second.log.String())
	}
	if strings.Contains(fr.second.log.String(), "runs as task") {
		t.Fatalf("the second wrap ran the call:\n%s", fr.second.log.String())
	}
}

// TestFirstWrapStoppedPastItsLeaseWhileATaskFollows: the wrap running the first execution is
// stopped (SIGSTOP) past its lease while the duplicate's task follows it. The following task
// ends failed, the outcome unknown (NOT executed again), and runs nothing; the stopped wrap,
// resumed, sees its task to the end, and its late result heals the intent: a duplicate sent
// after is handed that result, the call having run once.
func TestFirstWrapStoppedPastItsLeaseWhileATaskFollows(t *testing.T) {
	t.Parallel()
	needProc(t)
	fr := newFollowRigWith(t, []string{"--lease-secs", "2"}, []string{"--wait", "1s", "--lease-secs", "2"})
	params, firstID, dupID := fr.startFollowing(t, "stopped first")
	waitFor(t, "the duplicate's follower to start", func() bool {
		return strings.Contains(fr.second.log.String(), "follows the call in flight")
	})
	if err := syscall.Kill(fr.first.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(fr.first.Pid(), syscall.SIGCONT)
		}
	}
	defer resume()
	v := awaitTerminal(t, fr.second, dupID)
	resume()
	if v.Status != "failed" || !strings.Contains(v.StatusMessage, "NOT executed again") {
		t.Fatalf("the following task of a first wrap stopped past its lease: %+v; wrap log:\n%s", v, fr.second.log.String())
	}
	close(fr.answer)
	fq, _ := json.Marshal(map[string]string{"taskId": firstID})
	awaitTaskCompleted(t, fr.first, fq, 2*time.Minute)
	var again taskView
	waitFor(t, "the first execution's late result to settle the intent", func() bool {
		res, err := fr.second.Call(context.Background(), "tools/call", params)
		again = handleOf(t, res, err, "a duplicate after the first wrap resumed")
		if again.Status == "working" {
			// Following again: it ends with what the ledger then says.
			again = awaitTerminal(t, fr.second, again.TaskID)
		}
		return again.Status == "completed"
	})
	aq, _ := json.Marshal(map[string]string{"taskId": again.TaskID})
	if res, err := fr.second.Call(context.Background(), "tasks/result", aq); err != nil || !strings.Contains(string(res), "Research Report: stopped first") || !strings.Contains(string(res), `"effectfence/replayed":true`) {
		t.Fatalf("tasks/result of the duplicate after the first wrap resumed: %s %v", res, err)
	}
	if strings.Contains(fr.second.log.String(), "runs as task") {
		t.Fatalf("the second wrap ran the call:\n%s", fr.second.log.String())
	}
	if n := strings.Count(fr.first.log.String(), "runs as task"); n != 1 {
		t.Fatalf("the first wrap ran the call %d times:\n%s", n, fr.first.log.String())
	}
}
