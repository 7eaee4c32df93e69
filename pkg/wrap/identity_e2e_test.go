package wrap_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// Issue 12 item 1: numbers beyond double precision are distinct calls, and each runs.
func TestDistinctNumbersAreDistinctCalls(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	raw, err := w.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"charge","arguments":{ "amount" : 9007199254740993 }}`))
	var a result
	if err != nil || json.Unmarshal(raw, &a) != nil {
		t.Fatal(raw, err)
	}
	b := call(t, w.Session, "charge", `{"amount":9007199254740992}`)
	if a.replayed() || b.replayed() || a.IsError || b.IsError {
		t.Fatalf("distinct amounts must both run: %+v / %+v", a, b)
	}
	c := call(t, w.Session, "charge", `{"amount":9007199254740993.0}`)
	if !c.replayed() {
		t.Fatalf("the same value spelled otherwise is the same call: %+v", c)
	}
	// The ledger keeps the value exactly, and the arguments as the server received them.
	rec, err := r.openLedger().Status(context.Background(), strings.Trim(string(c.Meta["effectfence/intent"]), `"`))
	if err != nil || string(rec.Args) != `{"amount":9007199254740993}` ||
		!strings.HasSuffix(string(rec.ExactArgs), `"amount" : 9007199254740993 }`) || !strings.HasPrefix(string(rec.ExactArgs), `{"idempotency_key":"`) {
		t.Fatalf("ledger record: args %s exact %s %v", rec.Args, rec.ExactArgs, err)
	}
	effects := strings.Join(mcptest.Effects(r.effects), "\n")
	if r.effectCount() != 2 || !strings.Contains(effects, "amount=9007199254740993") || !strings.Contains(effects, "amount=9007199254740992") {
		t.Fatalf("want the two charges, got:\n%s", effects)
	}
}

// Issue 12 item 3: params a server could read otherwise than wrap are refused with -32602
// and reach no server.
func TestAmbiguousToolsCallRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	for _, params := range []string{
		`{"name":"charge","NAME":"balance","arguments":{"amount":3}}`,
		`{"name":"charge","arguments":{"amount":500},"Arguments":{"amount":1}}`,
		`{"name":"charge","arguments":{"amount":500},"arguments":{"amount":1}}`,
		`{"name":"charge","arguments":{"amount":5,"note":"\ud83d"}}`,
		`{"name":"balance","arguments":{"x":1,"x":2}}`, // refused for pass-through tools too
		// docs/identity.md's other refusals: invalid UTF-8, a number with an exponent beyond
		// ±10^9, a name that is not a non-empty string, arguments that are not an object.
		"{\"name\":\"charge\",\"arguments\":{\"amount\":5,\"note\":\"caf\xe9\"}}",
		`{"name":"charge","arguments":{"amount":1e1000000001}}`,
		`{"name":"charge","arguments":{"amount":5e-1000000001}}`,
		`{"name":"","arguments":{"amount":5}}`,
		`{"arguments":{"amount":5}}`,
		`{"name":"charge","arguments":[5]}`,
	} {
		_, err := w.Call(context.Background(), "tools/call", json.RawMessage(params))
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpc.Message, "NOT executed") {
			t.Errorf("%s: want -32602, got %v", params, err)
		}
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("refused calls reached the server: %d effects", n)
	}
}

// Issue 12 item 4: a tools/call without an id is not forwarded (a faithful server would run it
// every time, and nobody could learn its outcome).
func TestToolsCallNotificationIsNotForwarded(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	for range 3 {
		if err := w.Notify("tools/call", json.RawMessage(`{"name":"charge","arguments":{"amount":7}}`)); err != nil {
			t.Fatal(err)
		}
	}
	call(t, w.Session, "charge", `{"amount":8}`) // messages are handled in order: the notifications were seen
	if got := mcptest.Effects(r.effects); len(got) != 1 || !strings.Contains(got[0], "amount=8") {
		t.Fatalf("want only the charge of 8, got %q", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(w.log.String(), "without an id") {
		if time.Now().After(deadline) {
			t.Fatalf("not logged: %s", w.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The direct server runs them: the test server is the faithful kind.
	d := r.direct()
	_ = d.Notify("tools/call", json.RawMessage(`{"name":"charge","arguments":{"amount":9}}`))
	if _, err := d.Call(context.Background(), "ping", nil); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for r.effectCount() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the direct server did not run the notification: %q", mcptest.Effects(r.effects))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 12 item 6: no tool list, no blind call: a server that dies whenever its tools are
// listed gets no call, and the agent is told nothing ran and that a retry may run it.
func TestNoBlindCallWithoutAToolList(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.mode = "dielist"
	w := r.wrap("--wait", "5s")
	x := call(t, w.Session, "balance", `{}`)
	if !x.IsError || !strings.Contains(x.text(), "NOT sent and did not run") || string(x.Meta["effectfence/code"]) != `"tools_unknown"` {
		t.Fatalf("want a tools_unknown refusal, got %+v", x)
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("a call went through blind: %d effects", n)
	}
}

// Issue 12 item 7: under --key, a call waiting on an attempt of the same key but other
// arguments does not receive that attempt's failure: it gets intent_conflict.
func TestCoalescingJoinsOnlyTheSameCall(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--key", "fail:tag")
	var wg sync.WaitGroup
	var first result
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Long enough that the second call is sent while this one is still in flight, even
		// when polling the ledger takes seconds on a loaded machine.
		first = call(t, w.Session, "fail", `{"ms":8000,"tag":"k"}`)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !inFlight(r) {
		if time.Now().After(deadline) {
			t.Fatal("the first call never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	second := call(t, w.Session, "fail", `{"ms":1,"tag":"k"}`)
	wg.Wait()
	if !first.IsError || !strings.Contains(first.text(), "card declined") {
		t.Fatalf("first: %+v", first)
	}
	if strings.Contains(second.text(), "card declined") || string(second.Meta["effectfence/code"]) != `"intent_conflict"` {
		t.Fatalf("a call with other arguments received the other call's answer: %+v", second)
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("want 1 execution, got %d", n)
	}
}

// inFlight reports whether the rig's ledger has an intent in flight.
func inFlight(r *rig) bool {
	out, _ := exec.Command(efBin, "ledger", "ls", "--ledger", r.ledger, "--json").Output()
	return strings.Contains(string(out), `"in_flight"`)
}

// TestRepeatArgumentOfTheToolsOwnIsForwarded is docs/identity.md's "wrap removes
// [effectfence_repeat] from the arguments before the server sees them, unless the tool's own
// input schema declares a property of that name", through the real wrap process: a tool that
// declares it receives it as the agent sent it, and it is still part of the call's identity
// (the same value is a replay, a new value a new call).
func TestRepeatArgumentOfTheToolsOwnIsForwarded(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.mode = "repeatprop"
	w := r.wrap()
	first := call(t, w.Session, "own_repeat", `{"n":1,"effectfence_repeat":"a"}`)
	again := call(t, w.Session, "own_repeat", `{"effectfence_repeat":"a","n":1}`)
	other := call(t, w.Session, "own_repeat", `{"n":1,"effectfence_repeat":"b"}`)
	if first.IsError || first.replayed() || !again.replayed() || other.IsError || other.replayed() {
		t.Fatalf("own_repeat a, a again, b: %q, %q (replayed %v), %q (replayed %v); want run, replay, run", first.text(), again.text(), again.replayed(), other.text(), other.replayed())
	}
	effects := mcptest.Effects(r.effects)
	if len(effects) != 2 || !strings.HasPrefix(effects[0], `own_repeat {"n":1,"effectfence_repeat":"a"} `) || !strings.HasPrefix(effects[1], `own_repeat {"n":1,"effectfence_repeat":"b"} `) {
		t.Fatalf("the server received %q; want both calls with their effectfence_repeat, as sent", effects)
	}
}

// TestToolWithOddAnnotationsDoesNotStopTheOthers: a server that lists one tool with hints of
// the wrong types ("readOnlyHint": "yes") and one entry whose name is not a string. wrap reads
// the listing tool by tool: every other tool keeps what the listing says of it (charge is
// fenced: a duplicate replays), and the odd tool is fenced too, since only a readOnlyHint of
// true passes a tool through. Before, one such tool made the whole page unreadable, so wrap
// knew no tool and refused every call ("listing tools: ... cannot unmarshal").
func TestToolWithOddAnnotationsDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.mode = "oddannotations"
	w := r.wrap()
	for _, tool := range []string{"charge", "unlisted", "balance"} {
		args := `{"tag":"` + tool + `"}`
		if tool == "charge" {
			args = `{"amount":7}`
		}
		first := call(t, w.Session, tool, args)
		again := call(t, w.Session, tool, args)
		if first.IsError || first.replayed() {
			t.Fatalf("%s: %q (isError %v); want it run", tool, first.text(), first.IsError)
		}
		if fenced := tool != "balance"; again.IsError || again.replayed() != fenced {
			t.Fatalf("%s again: %q (replayed %v); want replayed %v", tool, again.text(), again.replayed(), fenced)
		}
	}
	if log := w.log.String(); strings.Contains(log, "cannot unmarshal") {
		t.Fatalf("wrap could not read the listing:\n%s", log)
	}
}

// docs/identity.md: effectfence_repeat asks for a deliberate repeat under --key too, as the
// replay note tells the model. Before, a keyed intent was named by the key fields alone, so
// the repeat the note asked for named the recorded call's intent with other arguments and was
// refused as intent_conflict ("the --key for this tool is too narrow"): there was no way to a
// deliberate repeat of a keyed call but a new key value. Now the repeat value names the intent
// with the key fields: a new value runs (with a new injected key), the same value again is
// replayed, and other arguments under the same key are still refused.
func TestRepeatArgumentUnderAKey(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--key", "charge:order")
	first := call(t, w.Session, "charge", `{"order":"o-1","amount":5}`)
	again := call(t, w.Session, "charge", `{"order":"o-1","amount":5}`)
	if first.IsError || first.replayed() || !again.replayed() || !strings.Contains(again.note(), `"effectfence_repeat"`) {
		t.Fatalf("charge, again: %q (replayed %v), %q (replayed %v, note %q)", first.text(), first.replayed(), again.text(), again.replayed(), again.note())
	}
	repeat := call(t, w.Session, "charge", `{"order":"o-1","amount":5,"effectfence_repeat":"2"}`)
	if repeat.IsError || repeat.replayed() {
		t.Fatalf("the repeat the note asks for: %q (isError %v, replayed %v, code %s); want it run", repeat.text(), repeat.IsError, repeat.replayed(), repeat.Meta["effectfence/code"])
	}
	if x := call(t, w.Session, "charge", `{"effectfence_repeat":"2","amount":5,"order":"o-1"}`); !x.replayed() {
		t.Fatalf("a retry of the repeat: %q (replayed %v); want it replayed", x.text(), x.replayed())
	}
	if x := call(t, w.Session, "charge", `{"order":"o-1","amount":6}`); string(x.Meta["effectfence/code"]) != `"intent_conflict"` {
		t.Fatalf("another amount under the same key: %q (code %s); want intent_conflict", x.text(), x.Meta["effectfence/code"])
	}
	effects := mcptest.Effects(r.effects)
	if len(effects) != 2 || !strings.Contains(effects[0], "amount=5 order=o-1 key=") || !strings.Contains(effects[1], "amount=5 order=o-1 key=") || effects[0] == effects[1] {
		t.Fatalf("the server ran %q; want the charge and its repeat, each with its own injected key", effects)
	}
}
