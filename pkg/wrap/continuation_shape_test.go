package wrap_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// sessionRig is one session of a front (a gateway's HTTP session) in this process: its own
// proxy and its own real test server child, on r's ledger led, its flights shared through
// shared as a front's sessions share them, initialized with init.
func sessionRig(t *testing.T, r *rig, led *store.Ledger, shared *wrap.Shared, init string) *lineRig {
	t.Helper()
	return sessionRigWait(t, r, led, shared, init, time.Hour)
}

// sessionRigWait is sessionRig with the given --wait.
func sessionRigWait(t *testing.T, r *rig, led *store.Ledger, shared *wrap.Shared, init string, wait time.Duration) *lineRig {
	t.Helper()
	l := &lineRig{t: t, r: r, led: led, log: &logBuf{}, out: make(chanSink, 1024)}
	p, err := wrap.New(wrap.Options{Command: r.childCmd(), Env: r.env(), Engine: led.Engine, Log: l.log, Wait: wait, Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	l.p = p
	p.Attach(l.out)
	t.Cleanup(func() { p.Stop("test over") })
	l.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + init + `}`)
	if m := l.answer("1"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	l.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return l
}

// TestQuestionIsNotHandedToASessionThatCannotReadIt: multi round-trip requests (SEP-2322,
// input_required) came with MCP 2026-07-28, and a server asks that way only a client that
// negotiated it (rmcp turns such an answer to an older client into an error). A gateway's
// sessions negotiate their versions each with its own server session, and share their
// flights: a duplicate in a 2025-11-25 session that waited for a 2026-07-28 session's first
// round was handed that round's input_required, which the TypeScript SDK 1.32 reads as a
// tool result with no content, a success, though nothing had run (and nothing would, had the
// other person declined). It now goes through the fence itself, once, and its server answers
// it as it answers that session; the other session's continuation then receives that result.
func TestQuestionIsNotHandedToASessionThatCannotReadIt(t *testing.T) {
	r := newRig(t)
	led := r.openLedger()
	shared := wrap.NewShared()
	asks := sessionRig(t, r, led, shared, `{"protocolVersion":"2026-07-28","capabilities":{"elicitation":{}},"clientInfo":{"name":"new-agent","version":"1"}}`)
	older := sessionRig(t, r, led, shared, `{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"old-agent","version":"1"}}`)
	gate := filepath.Join(r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"shape","until":%q,"mrtr_only":true}`, gate)
	asks.send(`{"jsonrpc":"2.0","id":"first","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
	waitFor(t, "the first round to reach the server", func() bool { return strings.Contains(asks.log.String(), "confirm tag=shape asking") })
	older.send(`{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
	waitFor(t, "the older session's duplicate to wait for the first round", func() bool { return older.p.Waiting() == 1 })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := asks.answer(`"first"`); !strings.Contains(string(m["result"]), `"resultType":"input_required"`) {
		t.Fatalf("the first round: %v, want the server's input_required", m)
	}
	m := older.answer(`"dup"`)
	if strings.Contains(string(m["result"]), "input_required") {
		t.Fatalf("the 2025-11-25 session's duplicate was handed the other session's question: %s", m["result"])
	}
	if dup := older.text(`"dup"`); dup.IsError || dup.text() != "confirmed unasked n=1" {
		t.Fatalf("the 2025-11-25 session's duplicate: %s, want it run as its server runs it for that session", m["result"])
	}
	// The same intent: the first session's continuation receives that result, run once.
	asks.send(`{"jsonrpc":"2.0","id":"cont","method":"tools/call","params":{"name":"confirm","arguments":` + args +
		`,"inputResponses":{"ok":{"action":"accept","content":{"ok":true}}},"requestState":"state-shape"}}`)
	if cont := asks.text(`"cont"`); !cont.replayed() || cont.text() != "confirmed unasked n=1" {
		t.Fatalf("the continuation: %+v %q, want the replay of the one run", cont, cont.text())
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// twoFirstRounds runs what TestRerunWaitingOnAnotherFirstRoundRunsAgain and
// TestQuestionRerunsAreBounded share: a 2025-11-25 session's duplicate ("dup") waits on a
// 2026-07-28 session's first round, which ends with a question; as the duplicate goes through
// the fence again (SetRerunning) a third session's identical first round is sent and holds the
// intent in its server, the duplicate waits on it, and it ends with a question too. It returns
// the rig and the older session, its duplicate not yet read.
func twoFirstRounds(t *testing.T, tag string) (*rig, *lineRig) {
	t.Helper()
	r := newRig(t)
	led := r.openLedger()
	shared := wrap.NewShared()
	newer := `{"protocolVersion":"2026-07-28","capabilities":{"elicitation":{}},"clientInfo":{"name":"new-agent","version":"1"}}`
	gate := filepath.Join(r.dir, "gate")
	args := fmt.Sprintf(`{"tag":%q,"until":%q,"mrtr_only":true}`, tag, gate)
	asking := "confirm tag=" + tag + " asking"
	var second *lineRig
	var once sync.Once
	held := make(chan struct{}) // closed once the second round holds the intent in its server
	t.Cleanup(wrap.SetRerunning(func() {
		once.Do(func() {
			// The first round has passed its gate and answered: the next round waits at it.
			if err := os.Remove(gate); err != nil {
				t.Error(err)
				return
			}
			second.send(`{"jsonrpc":"2.0","id":"second","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
			waitFor(t, "the second first round to reach its server", func() bool { return strings.Contains(second.log.String(), asking) })
			close(held)
		})
	}))
	asks := sessionRig(t, r, led, shared, newer)
	second = sessionRig(t, r, led, shared, newer)
	older := sessionRig(t, r, led, shared, `{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"old-agent","version":"1"}}`)
	asks.send(`{"jsonrpc":"2.0","id":"first","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
	waitFor(t, "the first round to reach the server", func() bool { return strings.Contains(asks.log.String(), asking) })
	older.send(`{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
	waitFor(t, "the older session's duplicate to wait for the first round", func() bool { return older.p.Waiting() == 1 })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := asks.answer(`"first"`); !strings.Contains(string(m["result"]), `"resultType":"input_required"`) {
		t.Fatalf("the first round: %v, want the server's input_required", m)
	}
	<-held
	waitFor(t, "the older session's duplicate to wait for the second round", func() bool { return older.p.Waiting() == 1 })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := second.answer(`"second"`); !strings.Contains(string(m["result"]), `"resultType":"input_required"`) {
		t.Fatalf("the second first round: %v, want the server's input_required", m)
	}
	return r, older
}

// TestRerunWaitingOnAnotherFirstRoundRunsAgain: a 2025-11-25 session's duplicate that waited
// on a 2026-07-28 session's first round goes through the fence itself, since it cannot read
// the question; going through, it may find the intent claimed by yet another identical first
// round (a third session's, that claimed it as the first round released it), and wait on
// that. That round's question is no more its answer than the first one's was: it goes
// through again, and runs, once. Before, it went through once only, and was handed the
// second round's input_required, which the TypeScript SDK 1.32 reads as a success with no
// content though nothing had run. The third session's call is sent, and holds the intent
// in its server, just as the duplicate goes through again (SetRerunning), so the duplicate
// waits on it whatever the scheduler does.
func TestRerunWaitingOnAnotherFirstRoundRunsAgain(t *testing.T) {
	r, older := twoFirstRounds(t, "again")
	m := older.answer(`"dup"`)
	if strings.Contains(string(m["result"]), "input_required") {
		t.Fatalf("the 2025-11-25 session's duplicate was handed another session's question: %s", m["result"])
	}
	if dup := older.text(`"dup"`); dup.IsError || dup.text() != "confirmed unasked n=1" {
		t.Fatalf("the 2025-11-25 session's duplicate: %s, want it run as its server runs it for that session", m["result"])
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// TestQuestionRerunsAreBounded: a call that waited on a first round answered with a question
// goes through the fence again (TestRerunWaitingOnAnotherFirstRoundRunsAgain), but not for as
// long as identical first rounds keep taking the intent before it: past maxQuestionReruns (1
// here) it is refused, NOT executed, and nothing ran for it.
func TestQuestionRerunsAreBounded(t *testing.T) {
	t.Cleanup(wrap.SetMaxQuestionReruns(1))
	r, older := twoFirstRounds(t, "bounded")
	dup := older.text(`"dup"`)
	if !dup.IsError || string(dup.Meta["effectfence/code"]) != `"question_reruns"` || !strings.Contains(dup.text(), "NOT executed") || !strings.Contains(dup.text(), "2 identical calls") {
		t.Fatalf("the duplicate past the bound: %s %s", dup.text(), dup.Meta["effectfence/code"])
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("%d executions, want none", n)
	}
}

// TestFollowingTaskRunsNothing: a task-augmented duplicate whose task follows an attempt in
// flight (TestTaskAugmentedDuplicateFollowsTheFlight) never runs the call, even when that
// attempt ends without an outcome to share, here a 2026-07-28 session's first round answered
// with a question, which its 2025-11-25 session cannot read: the intent is free, the follower's
// claim takes it and releases it, and the task ends failed saying nothing ran and to send the
// call again. (A plain duplicate would run the call, TestRerunWaitingOnAnotherFirstRoundRunsAgain;
// the follower has no agent waiting on a call to answer, only a task.)
func TestFollowingTaskRunsNothing(t *testing.T) {
	r := newRig(t)
	led := r.openLedger()
	shared := wrap.NewShared()
	asks := sessionRig(t, r, led, shared, `{"protocolVersion":"2026-07-28","capabilities":{"elicitation":{}},"clientInfo":{"name":"new-agent","version":"1"}}`)
	older := sessionRigWait(t, r, led, shared, `{"protocolVersion":"2025-11-25","capabilities":{"tasks":{},"elicitation":{}},"clientInfo":{"name":"old-agent","version":"1"}}`, 200*time.Millisecond)
	gate := filepath.Join(r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"follow","until":%q,"mrtr_only":true}`, gate)
	asks.send(`{"jsonrpc":"2.0","id":"first","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
	waitFor(t, "the first round to reach the server", func() bool { return strings.Contains(asks.log.String(), "confirm tag=follow asking") })
	older.send(`{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":{"name":"confirm","arguments":` + args + `,"task":{"ttl":60000}}}`)
	var h struct {
		Task struct {
			TaskID string `json:"taskId"`
			Status string `json:"status"`
		} `json:"task"`
	}
	if m := older.answer(`"dup"`); json.Unmarshal(m["result"], &h) != nil || h.Task.Status != "working" || !strings.HasPrefix(h.Task.TaskID, "effectfence-task-") {
		t.Fatalf("the task-augmented duplicate: %v, want a working task of wrap's own", m)
	}
	waitFor(t, "the follower to start", func() bool { return strings.Contains(older.log.String(), "follows the call in flight") })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := asks.answer(`"first"`); !strings.Contains(string(m["result"]), `"resultType":"input_required"`) {
		t.Fatalf("the first round: %v, want the server's input_required", m)
	}
	var st struct {
		Status        string `json:"status"`
		StatusMessage string `json:"statusMessage"`
	}
	for i := 0; ; i++ {
		st.Status, st.StatusMessage = "", ""
		id := fmt.Sprintf(`"get%d"`, i)
		older.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tasks/get","params":{"taskId":"` + h.Task.TaskID + `"}}`)
		if m := older.answer(id); json.Unmarshal(m["result"], &st) != nil {
			t.Fatalf("tasks/get: %v", m)
		}
		if st.Status != "working" {
			break
		}
		if i > 3000 {
			t.Fatal("the following task never ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Status != "failed" || !strings.Contains(st.StatusMessage, "NOT executed") || !strings.Contains(st.StatusMessage, "send it again") {
		t.Fatalf("the following task after its attempt asked a question: %+v", st)
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("%d executions, want none", n)
	}
}
