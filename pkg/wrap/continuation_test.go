package wrap_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// TestContinuationWaitingOnAFirstRoundRuns: a continuation of a multi round-trip call
// (SEP-2322: the same call with the client's inputResponses) that arrives while an identical
// call's first round is still in the server waits for it, as a duplicate does; that round's
// answer is input_required, not an outcome, and the continuation then goes through the fence
// itself and runs, once. Before, it was given the first round's input_required: the answers
// it carried were never sent and the client had to ask the person again (found with a raw
// Node server whose first round was slow).
func TestContinuationWaitingOnAFirstRoundRuns(t *testing.T) {
	l := newLineRig(t)
	gate := filepath.Join(l.r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"held","until":%q}`, gate)
	l.send(`{"jsonrpc":"2.0","id":"first","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
	waitFor(t, "the first round to reach the server", func() bool { return strings.Contains(l.log.String(), "confirm tag=held asking") })
	l.send(`{"jsonrpc":"2.0","id":"cont","method":"tools/call","params":{"name":"confirm","arguments":` + args +
		`,"inputResponses":{"ok":{"action":"accept","content":{"ok":true}}},"requestState":"state-held"}}`)
	waitFor(t, "the continuation to wait for the first round", func() bool { return l.p.Waiting() == 1 })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := l.answer(`"first"`); !strings.Contains(string(m["result"]), `"resultType":"input_required"`) {
		t.Fatalf("the first round: %v, want the server's input_required", m)
	}
	cont := l.text(`"cont"`)
	if cont.IsError || cont.replayed() || cont.text() != "confirmed n=1" {
		t.Fatalf("the continuation: %s; want it run (confirmed n=1), not the first round's question", l.raw[l.answerIndex(`"cont"`)])
	}
	if n := l.r.effectCount(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	// A duplicate now receives the continuation's result.
	l.send(`{"jsonrpc":"2.0","id":"again","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
	if again := l.text(`"again"`); !again.replayed() || again.text() != "confirmed n=1" {
		t.Fatalf("a duplicate after the continuation: %+v %q, want its replay", again, again.text())
	}
	// Three calls, three attempts: the continuation's wait for the first round is no answer of
	// its own (before, it was counted too, refused in flight, beside the continuation's run).
	if got, want := l.sinceBoot(), (fence.Counters{Admitted: 2, Replayed: 1}); got != want {
		t.Fatalf("counters %s, want %s", got.Line(), want.Line())
	}
}

// TestStateOnlyContinuationWaitingOnAFirstRoundRuns: a server may ask for nothing but a retry
// (SEP-2322: an input_required result with a requestState and no inputRequests, "still
// waiting" for an approval given elsewhere), and the client's continuation then carries the
// requestState alone, no inputResponses. Waiting on an identical call's first round, it is a
// continuation as one with answers is: it runs itself, once, and its requestState reaches the
// server. Before, it was taken for a first round and handed that round's input_required: its
// requestState never reached the server. (The continuation names MCP 2026-07-28 in its _meta,
// as every request of that version does: a client of an earlier one is never handed another
// call's question, TestQuestionIsNotHandedToASessionThatCannotReadIt.)
func TestStateOnlyContinuationWaitingOnAFirstRoundRuns(t *testing.T) {
	l := newLineRig(t)
	gate := filepath.Join(l.r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"state-only","until":%q}`, gate)
	l.send(`{"jsonrpc":"2.0","id":"first","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
	waitFor(t, "the first round to reach the server", func() bool { return strings.Contains(l.log.String(), "confirm tag=state-only asking") })
	l.send(`{"jsonrpc":"2.0","id":"cont","method":"tools/call","params":{"name":"confirm","arguments":` + args + `,"requestState":"state-held","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`)
	waitFor(t, "the continuation to wait for the first round", func() bool { return l.p.Waiting() == 1 })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := l.answer(`"first"`); !strings.Contains(string(m["result"]), `"resultType":"input_required"`) {
		t.Fatalf("the first round: %v, want the server's input_required", m)
	}
	if cont := l.text(`"cont"`); cont.IsError || cont.replayed() || cont.text() != "confirmed n=1" {
		t.Fatalf("the state-only continuation: %s; want it run (confirmed n=1), not the first round's question", l.raw[l.answerIndex(`"cont"`)])
	}
	if effects := mcptest.Effects(l.r.effects); len(effects) != 1 || !strings.Contains(effects[0], "state=state-held") {
		t.Fatalf("effects %q, want one, of the continuation's requestState", effects)
	}
}

// TestTaskAugmentedDuplicateOfAFirstRoundGetsTheQuestion: a task-augmented duplicate that
// waited on an identical call's first round, its client one that reads input_required (MCP
// 2026-07-28, named in its _meta), is handed that round's question as the server answered it:
// a result of resultType input_required. Before, it was wrapped into a local task, already
// completed, whose result was the question: a completed task is a final outcome, so the
// client took a call that had asked a question and run nothing for done (its content empty),
// and never answered it. MCP 2026-07-28 has no task-augmented tools/call (the tasks extension
// lets the server choose), so its server answers such a call as it answers any: with the
// question. The client's continuation then runs the call once.
func TestTaskAugmentedDuplicateOfAFirstRoundGetsTheQuestion(t *testing.T) {
	l := newLineRig(t)
	gate := filepath.Join(l.r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"tasked","until":%q}`, gate)
	l.send(`{"jsonrpc":"2.0","id":"first","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
	waitFor(t, "the first round to reach the server", func() bool { return strings.Contains(l.log.String(), "confirm tag=tasked asking") })
	l.send(`{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":{"name":"confirm","arguments":` + args + `,"task":{"ttl":60000},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`)
	waitFor(t, "the task-augmented duplicate to wait for the first round", func() bool { return l.p.Waiting() == 1 })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	first := l.answer(`"first"`)
	dup := l.answer(`"dup"`)
	if string(dup["result"]) != string(first["result"]) {
		t.Fatalf("the task-augmented duplicate got %s, want the first round's question as it was answered: %s", dup["result"], first["result"])
	}
	if !strings.Contains(string(dup["result"]), `"resultType":"input_required"`) || strings.Contains(string(dup["result"]), `"task"`) {
		t.Fatalf("the task-augmented duplicate got %s, want the question, not a task", dup["result"])
	}
	// Its continuation runs the call, once.
	l.send(`{"jsonrpc":"2.0","id":"cont","method":"tools/call","params":{"name":"confirm","arguments":` + args +
		`,"inputResponses":{"ok":{"action":"accept","content":{"ok":true}}},"requestState":"state-tasked"}}`)
	if cont := l.text(`"cont"`); cont.IsError || cont.replayed() || cont.text() != "confirmed n=1" {
		t.Fatalf("the continuation: %s; want it run (confirmed n=1)", l.raw[l.answerIndex(`"cont"`)])
	}
	if n := l.r.effectCount(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}
