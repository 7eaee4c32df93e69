//go:build unix

package wrap_test

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestKill9WhileATaskWorksFencesIt: wrap killed with kill -9 while a task it follows works in
// server-everything (simulate-research-query, a real task tool): the task may have had its
// effect, so the intent is unknown to the next wrap on the ledger, and a duplicate, task-
// augmented as the first call was, is answered with a failed task of wrap's own saying it was
// NOT executed again, never a new task in the server.
func TestKill9WhileATaskWorksFencesIt(t *testing.T) {
	t.Parallel()
	needProc(t)
	bin := peer(t, "mcp-server-everything")
	r := newRig(t)
	r.childCmdOverride = []string{bin}
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	w := r.wrap()
	params := json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"killed wrap"},"task":{"ttl":300000}}`)
	res, err := w.Call(context.Background(), "tools/call", params)
	if err != nil || !strings.Contains(string(res), `"status":"working"`) {
		t.Fatalf("want the server's working task, got %s %v", res, err)
	}
	led := r.openLedger()
	var claim *fence.Record
	_ = led.Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight}}, func(rec *fence.Record) bool {
			claim = rec
			return false
		})
	})
	if claim == nil {
		t.Fatal("the task's intent is not in flight while the task works")
	}
	kids := childPids(w.Pid())
	if err := syscall.Kill(w.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	for _, k := range kids {
		waitFor(t, "the server to die with wrap", func() bool { return !alive(k) })
	}
	w2 := r.wrap()
	again, err := w2.Call(context.Background(), "tools/call", params)
	var h struct {
		Task struct {
			TaskID        string `json:"taskId"`
			Status        string `json:"status"`
			StatusMessage string `json:"statusMessage"`
		} `json:"task"`
	}
	if err != nil || json.Unmarshal(again, &h) != nil || !strings.HasPrefix(h.Task.TaskID, "effectfence-task-") || h.Task.Status != "failed" || !strings.Contains(h.Task.StatusMessage, "NOT executed again") {
		t.Fatalf("the duplicate after kill -9: %s %v; want a failed task of wrap's own, not run again", again, err)
	}
	rec, err := led.Status(context.Background(), claim.Intent)
	if err != nil || rec.State != fence.StateUnknown {
		t.Fatalf("intent state %s, %v; want unknown", rec.State, err)
	}
	if !strings.Contains(w.log.String(), "runs as task") {
		t.Fatalf("the first wrap never followed the task:\n%s", w.log.String())
	}
}
