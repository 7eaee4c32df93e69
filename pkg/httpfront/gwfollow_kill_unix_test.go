//go:build unix

package httpfront_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGatewayKill9WhileATaskFollowsRunsNothingTwice: a gateway whose sessions hold a first
// execution (server-everything's simulate-research-query, its agent's question unanswered) and
// a task that follows it is killed with kill -9. Started again on its ledger, it runs nothing
// for the same call sent again by a real SDK client: the first execution's outcome is unknown
// (its holder is gone), so the task the client is handed fails saying the call was NOT
// executed again, and the call ran once in all.
func TestGatewayKill9WhileATaskFollowsRunsNothingTwice(t *testing.T) {
	t.Parallel()
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	gateway, peers := followGateway(t, ledger, "--wait", "1s")
	const topic = "killed gateway"
	first := startAgent(t, peers, gateway.url, followAlice, "first", topic)
	first.line("asked")
	follow := startAgent(t, peers, gateway.url, followAlice, "follow", topic)
	followTask := strings.TrimSpace(follow.line("task working "))
	waitProcLog(t, gateway, "the follower", "task "+followTask+" follows the call in flight")
	if err := gateway.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gateway.exited:
	case <-time.After(time.Minute):
		t.Fatal("the killed gateway never exited")
	}
	if rep := follow.report(); rep.Error == nil || rep.Replayed {
		t.Fatalf("the following agent of a killed gateway: %+v", rep)
	}
	again, _ := followGateway(t, ledger, "--wait", "1s")
	retry := startAgent(t, peers, again.url, followAlice, "follow", topic)
	rep := retry.report()
	if rep.Error == nil || !strings.Contains(rep.StatusMessage, "NOT executed again") || rep.Replayed {
		t.Fatalf("the call sent again after the kill: %+v", rep)
	}
	for _, g := range []*proc{gateway, again} {
		if strings.Contains(g.log.String(), "DATA RACE") {
			t.Fatalf("a data race:\n%s", g.log.String())
		}
	}
	if n := strings.Count(gateway.log.String(), "runs as task") + strings.Count(again.log.String(), "runs as task"); n != 1 {
		t.Fatalf("the call ran %d times, want 1:\n%s\n%s", n, gateway.log.String(), again.log.String())
	}
}
