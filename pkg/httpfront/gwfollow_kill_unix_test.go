//go:build unix

package httpfront_test

import (
	"context"
	"encoding/json"
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

// TestKilledFollowingClientsFreeTheirSessions: through `wrap --listen --max-sessions 3`, a
// first execution holds one session (server-everything's simulate-research-query, its agent's
// question unanswered) and two duplicates past --wait hold tasks that follow it: a real SDK
// client killed with kill -9 once its task is working, and a raw client that asked tasks/result
// of its task and dropped the connection: every place is taken. The two followers hold nothing
// in their servers, so their sessions idle out as any (--session-idle) and a new client gets a
// place; the first execution runs on, its outcome is recorded, and a later duplicate is handed
// it, the call having run once. Before 2026-12-07 a task that followed kept its session open
// until the first execution ended, whatever its client became: crashed agents held every place
// under --max-sessions, and each new client was refused (503).
func TestKilledFollowingClientsFreeTheirSessions(t *testing.T) {
	t.Parallel()
	gateway, peers := followGateway(t, "", "--wait", "1s", "--session-idle", "4s", "--max-sessions", "3")
	const topic = "killed follower"
	first := startAgent(t, peers, gateway.url, followAlice, "first", topic)
	first.line("asked")

	killed := startAgent(t, peers, gateway.url, followAlice, "follow", topic)
	killedSession := strings.TrimSpace(killed.line("session "))
	killedTask := strings.TrimSpace(killed.line("task working "))
	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-killed.done

	g := &gw{t: t, url: gateway.url}
	ah := hdr{"Authorization": "Bearer " + followAlice}
	raw := g.openTasks(ah)
	r := g.mustPost(raw, ah, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"simulate-research-query","arguments":{"topic":"`+topic+`","ambiguous":true},"task":{"ttl":300000}}}`)
	var created struct {
		Task struct{ TaskID, Status string }
	}
	if r.status != 200 || len(r.msgs) == 0 || json.Unmarshal(r.last(t)["result"], &created) != nil || created.Task.Status != "working" {
		t.Fatalf("the raw client's task-augmented duplicate: %d %v", r.status, r.raw)
	}
	waitProcLog(t, gateway, "the raw client's follower", "task "+created.Task.TaskID+" follows the call in flight")
	ctx, cut := context.WithCancel(context.Background())
	go func() {
		// The connection is cut once the request is sent (the proxy serves it on): the wait
		// for tasks/result stays, its client gone.
		time.Sleep(500 * time.Millisecond)
		cut()
	}()
	if _, err := g.post(ctx, raw, ah, `{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"`+created.Task.TaskID+`"}}`); err == nil {
		t.Fatal("tasks/result of a working task answered before the connection was cut")
	}

	for _, sid := range []string{killedSession, raw} {
		waitProcLog(t, gateway, "a session whose client is gone", "session "+sid[:8]+" idle for 4s: closed")
	}
	waitProcLog(t, gateway, "the killed client's follower", "task "+killedTask+" stopped following")
	waitProcLog(t, gateway, "the raw client's follower", "task "+created.Task.TaskID+" stopped following")
	g.open(ah) // a place is free

	first.stdin.Close()
	if rep := first.report(); rep.Error != nil || !strings.Contains(rep.Text, "Research Report: "+topic) || rep.Replayed {
		t.Fatalf("the first agent: %+v", rep)
	}
	later := startAgent(t, peers, gateway.url, followAlice, "follow", topic)
	if rep := later.report(); rep.Error != nil || !rep.Replayed || !strings.Contains(rep.Text, "Research Report: "+topic) {
		t.Fatalf("a later duplicate: %+v", rep)
	}
	if n := strings.Count(gateway.log.String(), "runs as task"); n != 1 {
		t.Fatalf("the call ran %d times, want 1:\n%s", n, gateway.log.String())
	}
	if strings.Contains(gateway.log.String(), "DATA RACE") {
		t.Fatal("a data race")
	}
}
