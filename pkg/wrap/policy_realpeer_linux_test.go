package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/ledgerturn"
	"github.com/effectfence/effectfence/pkg/fence"
)

// The policy file's per-tool settings against the real thing: server-everything (the
// TypeScript SDK under node) annotates trigger-long-running-operation readOnlyHint, so wrap
// passes it through unless something fences it (docs/policy.md, rule 4: `fence: true`).

const longOp = "trigger-long-running-operation"

// realEverythingRig is a rig whose child is server-everything, run by node directly (the .bin
// entry is the script itself, so node is wrap's only child and its group's leader).
func realEverythingRig(t *testing.T) *rig {
	r := newRig(t)
	r.childCmdOverride = []string{peer(t, "mcp-server-everything")}
	return r
}

// TestPolicyFencedReadOfARealServerKilledMidCall: a policy's `fence: true` fences a tool the
// server annotates read-only; the server (node) killed with SIGKILL mid-call leaves the
// outcome unknown (docs/wrap.md, "An unknown outcome is fenced"): the call and a duplicate
// that waited for it are answered that it was NOT executed again, a retry is refused, the
// ledger holds one claim, unknown, and the next call of another tool reaches a restarted
// server.
func TestPolicyFencedReadOfARealServerKilledMidCall(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := realEverythingRig(t)
	path := writePolicy(t, r, "version: 1\ntools:\n  "+longOp+":\n    fence: true\n")
	w := r.wrap("--policy", path)
	args := `{"duration":60,"steps":60}`
	first := callInBackground(w.Session, longOp, args)
	led := r.openLedger()
	claim := waitForClaim(t, led)
	if claim.Tool != longOp {
		t.Fatalf("the claim is of %q, want %q", claim.Tool, longOp)
	}
	node := groupLeader(t, w)
	dup := callInBackground(w.Session, longOp, args)
	// The duplicate is in wrap before the kill: it is read in order, before the ping.
	if _, err := w.Call(context.Background(), "ping", nil); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(node, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		ch         <-chan called
	}{{"the call", "will NOT be executed again", first}, {"its duplicate", "NOT executed", dup}} {
		select {
		case a := <-c.ch:
			if a.err != nil || !a.x.IsError || a.x.replayed() || !strings.Contains(a.x.text(), "unknown") || !strings.Contains(a.x.text(), c.want) {
				t.Errorf("%s, its server killed: %q %v, want a tool error saying the outcome is unknown and %q", c.name, a.x.text(), a.err, c.want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s was not answered 30 s after its server was killed", c.name)
		}
	}
	if rec, err := led.Status(context.Background(), claim.Intent); err != nil || rec.State != fence.StateUnknown {
		t.Fatalf("the intent after the kill: %+v %v, want unknown", rec, err)
	}
	retry := call(t, w.Session, longOp, args)
	if !retry.IsError || !strings.Contains(retry.text(), "NOT executed") {
		t.Fatalf("a retry of the call whose server was killed: %q, want refused", retry.text())
	}
	if rec, err := led.Status(context.Background(), claim.Intent); err != nil || rec.State != fence.StateUnknown || rec.Token != claim.Token {
		t.Fatalf("the intent after a retry: %+v %v, want unknown under the first claim (token %d)", rec, err, claim.Token)
	}
	// The server restarts for the next call; echo (read-only, no entry) passes through.
	if x := call(t, w.Session, "echo", `{"message":"after"}`); x.IsError || !strings.Contains(x.text(), "after") {
		t.Fatalf("echo after the restart: %+v", x)
	}
	if n := len(childPids(w.Pid())); n != 1 || childPids(w.Pid())[0] == node {
		t.Fatalf("wrap's children after the restart: %v (the killed server was %d)", childPids(w.Pid()), node)
	}
	// Nothing of the killed server's group runs, and its wrap is alive: the lease does not
	// hold the clear (docs/wrap.md).
	if code, stderr := r.ledgerCmd("clear", claim.Intent, "--reason", "checked: nothing ran", "--claim", fmt.Sprint(claim.Token)); code != 0 {
		t.Fatalf("clear of the call whose server was killed: exit %d, %s", code, stderr)
	}
}

// TestPolicyWaitOfADuplicateWhileTheRealServerIsStopped: the policy's per-tool `wait` bounds a
// duplicate's wait for a call inside a server stopped with SIGSTOP: it is refused in flight
// (NOT executed) after about that wait, and the call, once the server is continued, is
// recorded and replayed to the next duplicate byte for byte (docs/wrap.md, "Identical calls
// run once").
func TestPolicyWaitOfADuplicateWhileTheRealServerIsStopped(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := realEverythingRig(t)
	path := writePolicy(t, r, "version: 1\ntools:\n  "+longOp+":\n    fence: true\n    wait: 1s\n")
	w := r.wrap("--policy", path)
	listingSettled(t, w)
	args := `{"duration":1,"steps":1}`
	first := callInBackground(w.Session, longOp, args)
	led := r.openLedger()
	claim := waitForClaim(t, led)
	node := groupLeader(t, w)
	if err := syscall.Kill(node, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(node, syscall.SIGCONT)
	start := time.Now()
	dup, err := callE(w.Session, longOp, args)
	waited := time.Since(start)
	if err != nil || !dup.IsError || dup.replayed() || !strings.Contains(dup.text(), "NOT executed") {
		t.Fatalf("a duplicate while the call's server is stopped: %q %v, want refused in flight", dup.text(), err)
	}
	if waited > 20*time.Second {
		t.Fatalf("the duplicate waited %s, past the policy's wait of 1s (the default is 30s)", waited)
	}
	if err := syscall.Kill(node, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var a called
	select {
	case a = <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the call was not answered 30 s after its server was continued")
	}
	if a.err != nil || a.x.IsError || !strings.Contains(a.x.text(), "completed") {
		t.Fatalf("the call: %q %v", a.x.text(), a.err)
	}
	if rec, err := led.Status(context.Background(), claim.Intent); err != nil || rec.State != fence.StateDone {
		t.Fatalf("the intent once the call ended: %+v %v, want done", rec, err)
	}
	again := call(t, w.Session, longOp, args)
	if !again.replayed() || again.same() != a.x.same() {
		t.Fatalf("a duplicate after the call: %+v, want the recorded %s replayed", again, a.x.same())
	}
}

// TestClientStopSequenceMidCallOfARealServer: an MCP client stops wrap as docs/wrap.md says
// clients do (stdin closed, SIGTERM 2 s later, SIGKILL 2 s after that) while a fenced call,
// longer than the grace, runs in the real server, or sits in it stopped with SIGSTOP (the
// SIGTERM wrap sends it then waits, pending, and only SIGKILL ends it). The outcome is
// recorded before the SIGKILL as unknown, saying effectfence stopped the server with the call
// inside it; the server does not outlive wrap; a retry through the next wrap is refused, NOT
// executed.
func TestClientStopSequenceMidCallOfARealServer(t *testing.T) {
	t.Parallel()
	needProc(t)
	for _, stopped := range []bool{false, true} {
		name := "running"
		if stopped {
			name = "stopped"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := realEverythingRig(t)
			path := writePolicy(t, r, "version: 1\ntools:\n  "+longOp+":\n    fence: true\n")
			rw := r.initializedRawWrap("--policy", path)
			const args = `{"duration":60,"steps":60}`
			rw.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+longOp+`","arguments":`+args+`}}`)
			led := r.openLedger()
			claim := waitForClaim(t, led)
			kids := childPids(rw.cmd.Process.Pid)
			if len(kids) != 1 {
				t.Fatalf("wrap's children: %v, want its server", kids)
			}
			node := kids[0]
			defer syscall.Kill(-node, syscall.SIGKILL)
			if stopped {
				if err := syscall.Kill(node, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
			}
			exited := make(chan struct{})
			go func() { _ = rw.cmd.Wait(); close(exited) }()
			rw.in.Close()
			for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
				select {
				case <-exited:
				case <-time.After(2 * time.Second):
					_ = rw.cmd.Process.Signal(sig)
				}
			}
			<-exited
			rec, err := led.Status(context.Background(), claim.Intent)
			if err != nil || rec.State != fence.StateUnknown || !strings.Contains(rec.Reason, "effectfence stopped the MCP server") {
				t.Fatalf("the call cut by the client's stop: %+v %v, want unknown, saying effectfence stopped the server; wrap's stderr:\n%s", rec, err, rw.log.String())
			}
			waitFor(t, "the server to be gone", func() bool { return !alive(node) })
			w := r.wrap("--policy", path)
			if x := call(t, w.Session, longOp, args); !x.IsError || !strings.Contains(x.text(), "NOT executed") {
				t.Fatalf("a retry through the next wrap: %q, want refused", x.text())
			}
		})
	}
}

// TestTaskOfARealServerKilledMidTaskIsUnknown: docs/wrap.md, "Tasks": a task-augmented call
// whose server can no longer be asked (killed with SIGKILL while the task works) is unknown
// and fenced, never freed as not sent: a duplicate waiting for its final result and a retry
// (plain, or task-augmented: a failed task) are told it was NOT executed again, and the ledger
// keeps the one claim, unknown. Against server-everything's simulate-research-query (node,
// the TypeScript SDK's tasks).
func TestTaskOfARealServerKilledMidTaskIsUnknown(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := realEverythingRig(t)
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	w := r.wrap()
	ctx := context.Background()
	const tool, args = "simulate-research-query", `{"topic":"killed mid-task"}`
	params := json.RawMessage(`{"name":"` + tool + `","arguments":` + args + `,"task":{"ttl":300000}}`)
	res, err := w.Call(ctx, "tools/call", params)
	if err != nil || !strings.Contains(string(res), `"taskId"`) {
		t.Fatalf("want a task handle, got %s %v", res, err)
	}
	led := r.openLedger()
	claim := waitForClaim(t, led)
	node := groupLeader(t, w)
	dup := callInBackground(w.Session, tool, args)
	if _, err := w.Call(ctx, "ping", nil); err != nil { // the duplicate is in wrap
		t.Fatal(err)
	}
	if err := syscall.Kill(node, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-dup:
		if a.err != nil || !a.x.IsError || a.x.replayed() || !strings.Contains(a.x.text(), "NOT executed") {
			t.Fatalf("a duplicate waiting for the task: %q %v, want refused", a.x.text(), a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the duplicate was not answered 30 s after the task's server was killed")
	}
	if rec, err := led.Status(ctx, claim.Intent); err != nil || rec.State != fence.StateUnknown || rec.Token != claim.Token {
		t.Fatalf("the task's intent: %+v %v, want unknown under its one claim", rec, err)
	}
	if x := call(t, w.Session, tool, args); !x.IsError || !strings.Contains(x.text(), "NOT executed") {
		t.Fatalf("a plain retry: %q, want refused", x.text())
	}
	again, err := w.Call(ctx, "tools/call", params)
	if err != nil || !strings.Contains(string(again), `"status":"failed"`) {
		t.Fatalf("a task-augmented retry: %s %v, want a failed task", again, err)
	}
	if rec, err := led.Status(ctx, claim.Intent); err != nil || rec.State != fence.StateUnknown || rec.Token != claim.Token {
		t.Fatalf("the task's intent after the retries: %+v %v, want unknown under its one claim", rec, err)
	}
}

// TestTaskAskingThePersonMidwayIsRecordedOnce: docs/wrap.md, "Tasks", with the real
// input_required flow of MCP 2025-11-25 (FIELD.md): server-everything's simulate-research-query
// with ambiguous set moves its task to input_required and sends elicitation/create with the
// task related, delivered through tasks/result, which wrap itself is waiting on. The question
// reaches the agent, its answer reaches the server, and the task's final result, naming the
// answer, is what wrap records: a duplicate that waited meanwhile and a later one receive it,
// and the person is asked once.
func TestTaskAskingThePersonMidwayIsRecordedOnce(t *testing.T) {
	t.Parallel()
	r := realEverythingRig(t)
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{},"elicitation":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	asked := make(chan string, 4)
	r.onRequest = func(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
		if method != "elicitation/create" {
			return nil, fmt.Errorf("unexpected request %s", method)
		}
		var q struct {
			RequestedSchema struct {
				Properties struct {
					Interpretation struct {
						OneOf []struct {
							Const string `json:"const"`
						} `json:"oneOf"`
					} `json:"interpretation"`
				} `json:"properties"`
			} `json:"requestedSchema"`
		}
		if err := json.Unmarshal(params, &q); err != nil || len(q.RequestedSchema.Properties.Interpretation.OneOf) == 0 {
			return nil, fmt.Errorf("an elicitation without interpretations: %s", params)
		}
		choice := q.RequestedSchema.Properties.Interpretation.OneOf[0].Const
		asked <- choice
		return json.Marshal(map[string]any{"action": "accept", "content": map[string]string{"interpretation": choice}})
	}
	w := r.wrap()
	ctx := context.Background()
	const tool, args = "simulate-research-query", `{"topic":"python","ambiguous":true}`
	res, err := w.Call(ctx, "tools/call", json.RawMessage(`{"name":"`+tool+`","arguments":`+args+`,"task":{"ttl":300000}}`))
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err != nil || json.Unmarshal(res, &created) != nil || created.Task.TaskID == "" {
		t.Fatalf("want a task handle, got %s %v", res, err)
	}
	dup := callInBackground(w.Session, tool, args)
	var choice string
	select {
	case choice = <-asked:
	case <-time.After(60 * time.Second):
		t.Fatalf("the person was not asked within a minute; wrap's stderr:\n%s", w.log.String())
	}
	q, _ := json.Marshal(map[string]string{"taskId": created.Task.TaskID})
	awaitTaskCompleted(t, w, q, 60*time.Second)
	final, err := w.Call(ctx, "tasks/result", q)
	if err != nil || !strings.Contains(string(final), choice) {
		t.Fatalf("the task's final result: %s %v, want it to name the answer %q", final, err, choice)
	}
	select {
	case a := <-dup:
		if a.err != nil || a.x.IsError || !strings.Contains(a.x.text(), choice) {
			t.Fatalf("the duplicate that waited: %q %v, want the final result", a.x.text(), a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the duplicate that waited was not answered 30 s after the task completed")
	}
	if later := call(t, w.Session, tool, args); !later.replayed() || !strings.Contains(later.text(), choice) {
		t.Fatalf("a later duplicate: %+v, want the recorded final result", later)
	}
	if recs := r.records(t)[tool]; len(recs) != 1 || recs[0].State != fence.StateDone {
		t.Fatalf("the records of %s: %+v, want one, done", tool, recs)
	}
	select {
	case again := <-asked:
		t.Fatalf("the person was asked twice (again: %q)", again)
	default:
	}
}

// TestStoppedWrapsRerunSafeCallIsNotTakenOver: docs/policy.md's `rerun_safe` takes over a claim
// whose holder vanished, and docs/RELIABILITY.md's rule 4 says a live holder never vanishes,
// whatever its lease says. Two wraps of the real server-everything on one ledger, the policy
// declaring the tool re-run safe: the first wrap is stopped (SIGSTOP) past its 1 s lease while
// its server, running on, finishes the call. A duplicate through the second wrap is refused
// (NOT executed), not run a second time; the first wrap, continued, records the result it
// got, and the second then replays it.
func TestStoppedWrapsRerunSafeCallIsNotTakenOver(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := realEverythingRig(t)
	path := writePolicy(t, r, "version: 1\ntools:\n  "+longOp+":\n    fence: true\n    rerun_safe: true\n")
	a := r.wrap("--policy", path, "--lease-secs", "1")
	b := r.wrap("--policy", path, "--lease-secs", "1", "--wait", "1s")
	const args = `{"duration":2,"steps":2}`
	first := callInBackground(a.Session, longOp, args)
	led := r.openLedger()
	claim := waitForClaim(t, led)
	// Stopped, every thread of it, outside a transaction of its own (ledgerturn.StopOutsideTurn):
	// the lease the ledger then holds is the last it renewed.
	if _, err := ledgerturn.StopOutsideTurn(a.Pid(), r.ledger); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(a.Pid(), syscall.SIGCONT)
	waitFor(t, "the lease, which the stopped wrap cannot renew, to lapse", func() bool {
		rec, err := led.Status(context.Background(), claim.Intent)
		return err == nil && rec.State == fence.StateInFlight && !time.Now().Before(rec.LeaseUntil)
	})
	dup := call(t, b.Session, longOp, args)
	if !dup.IsError || dup.replayed() || !strings.Contains(dup.text(), "NOT executed") {
		t.Fatalf("a duplicate while the holder is stopped past its lease: %q, want refused (the holder is alive)", dup.text())
	}
	if rec, err := led.Status(context.Background(), claim.Intent); err != nil || rec.Token != claim.Token {
		t.Fatalf("the intent while its holder is stopped: %+v %v, want the first claim (token %d), never taken over", rec, err, claim.Token)
	}
	if err := syscall.Kill(a.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var got called
	select {
	case got = <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the call was not answered 30 s after its wrap was continued")
	}
	if got.err != nil || got.x.IsError || !strings.Contains(got.x.text(), "completed") {
		t.Fatalf("the call: %q %v", got.x.text(), got.err)
	}
	waitFor(t, "the holder's late result to heal the intent", func() bool {
		rec, err := led.Status(context.Background(), claim.Intent)
		return err == nil && rec.State == fence.StateDone
	})
	if again := call(t, b.Session, longOp, args); !again.replayed() || again.same() != got.x.same() {
		t.Fatalf("a duplicate after the heal: %+v, want the recorded %s", again, got.x.same())
	}
}

// listingSettled waits for wrap's listing of server-everything's tools to settle. The server
// adds a tool once initialized (get-roots-list, for an agent with roots) and says so
// (notifications/tools/list_changed), and wrap lists the tools again. A refresh still under
// way when the server is stopped holds every call, a duplicate's too, for up to --wait (30 s)
// before the policy's wait begins: in a full CI run the duplicate was answered after 31 s. A
// call the agent sends after list_changed is judged by the new listing, so it waits for the
// refresh: an echo, answered, is after it.
func listingSettled(t *testing.T, w *wrapProc) {
	t.Helper()
	deadline := time.After(time.Minute)
	for seen := false; !seen; {
		select {
		case m := <-w.notes:
			seen = m == "notifications/tools/list_changed"
		case <-deadline:
			t.Fatal("server-everything did not say its tool list changed within a minute of initialize")
		}
	}
	if x := call(t, w.Session, "echo", `{"message":"listed"}`); x.IsError || !strings.Contains(x.text(), "listed") {
		t.Fatalf("echo after list_changed: %+v", x)
	}
}
