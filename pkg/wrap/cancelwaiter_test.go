package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// lineRig is a wrap session in this process (the test server a real child behind it), driven
// message by message as an agent would: it keeps every message wrap sent, in order.
type lineRig struct {
	t      *testing.T
	r      *rig
	led    *store.Ledger
	p      *wrap.Proxy
	log    *logBuf
	out    chanSink
	seen   []map[string]json.RawMessage
	raw    []string // seen as wrap wrote them
	mu     sync.Mutex
	events []wrap.CallEvent
	// ended holds the ids of the requests wrap ended without a response (wrap.Ender).
	ended map[string]bool
}

// lineSink is the rig's sink: wrap's lines go to out, and the requests it ends without a
// response are noted in ended.
type lineSink struct {
	chanSink
	l *lineRig
}

func (s lineSink) NoResponse(id json.RawMessage) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.l.ended == nil {
		s.l.ended = map[string]bool{}
	}
	s.l.ended[string(id)] = true
}

func newLineRig(t *testing.T) *lineRig {
	l := &lineRig{t: t, r: newRig(t), log: &logBuf{}, out: make(chanSink, 1024)}
	l.led = l.r.openLedger()
	// Duplicates wait for the call as long as a test may take: a wait that ends is an event
	// of the test, never --wait running out.
	p, err := wrap.New(wrap.Options{Command: l.r.childCmd(), Env: l.r.env(), Engine: l.led.Engine, Log: l.log, Wait: time.Hour,
		Observe: func(ev wrap.CallEvent) { l.mu.Lock(); l.events = append(l.events, ev); l.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	l.p = p
	p.Attach(lineSink{l.out, l})
	t.Cleanup(func() { p.Stop("test over") })
	l.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initNoElicit + `}`)
	if m := l.answer("1"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	l.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return l
}

func (l *lineRig) send(line string) { l.p.Dispatch([]byte(line)) }

func (l *lineRig) call(id, args string) {
	l.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"slow","arguments":` + args + `}}`)
}

func (l *lineRig) cancel(id string) {
	l.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `,"reason":"the agent gave up"}}`)
}

// answer reads wrap's messages until the response to id, and returns it.
func (l *lineRig) answer(id string) map[string]json.RawMessage {
	l.t.Helper()
	if m := l.answerSeen(id); m != nil {
		return m
	}
	for {
		select {
		case line := <-l.out:
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil {
				l.t.Fatalf("wrap wrote %q", line)
			}
			l.seen, l.raw = append(l.seen, m), append(l.raw, string(line))
			if m["method"] == nil && string(m["id"]) == id {
				return m
			}
		case <-time.After(60 * time.Second):
			l.t.Fatalf("no answer to %s; log:\n%s", id, l.log.String())
		}
	}
}

// answerSeen is the response to id among the messages read so far, if any.
func (l *lineRig) answerSeen(id string) map[string]json.RawMessage {
	if i := l.answerIndex(id); i >= 0 {
		return l.seen[i]
	}
	return nil
}

func (l *lineRig) answerIndex(id string) int {
	for i, m := range l.seen {
		if m["method"] == nil && string(m["id"]) == id {
			return i
		}
	}
	return -1
}

// settled reads wrap's messages until the request id has ended: it reports true when it was
// answered, false when wrap ended it without a response (a cancelled request).
func (l *lineRig) settled(id string) bool {
	l.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		if l.answerIndex(id) >= 0 {
			return true
		}
		l.mu.Lock()
		ended := l.ended[id]
		l.mu.Unlock()
		if ended {
			return false
		}
		select {
		case line := <-l.out:
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil {
				l.t.Fatalf("wrap wrote %q", line)
			}
			l.seen, l.raw = append(l.seen, m), append(l.raw, string(line))
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			l.t.Fatalf("the request %s was neither answered nor ended in a minute; log:\n%s", id, l.log.String())
		}
	}
}

// drained reads every message wrap sent before the response to a ping sent now, once no
// request is being served. It proves no negative about one request: a request leaves InFlight
// just before its answer is written, so that answer may follow the ping's (settled waits for
// a request's end).
func (l *lineRig) drained(pingID string) {
	l.t.Helper()
	waitFor(l.t, "every request to end", func() bool { return len(l.p.InFlight()) == 0 })
	l.send(`{"jsonrpc":"2.0","id":` + pingID + `,"method":"ping"}`)
	l.answer(pingID)
}

func (l *lineRig) text(id string) result {
	l.t.Helper()
	m := l.answer(id)
	var x result
	if err := json.Unmarshal(m["result"], &x); err != nil || m["result"] == nil {
		l.t.Fatalf("the answer to %s is not a tool result: %v", id, m)
	}
	return x
}

func (l *lineRig) sinceBoot() fence.Counters {
	l.t.Helper()
	st, err := l.led.Engine.Stats(context.Background())
	if err != nil {
		l.t.Fatal(err)
	}
	return st.SinceBoot
}

// outcomes is what Options.Observe was told of each call, in the order the calls ended.
func (l *lineRig) outcomes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.events {
		out = append(out, ev.Outcome+"/"+ev.Code)
	}
	return out
}

// A duplicate waiting for the outcome of the call it duplicates (coalesced) that its agent
// cancels stops waiting and gets no response (MCP: a cancelled request is not answered);
// nothing ran for it. The call it waited on is not touched: it runs to its end, once, and is
// answered, and a later duplicate replays it. The cancelled duplicate counts as refused in
// flight (it ended while the intent was in flight and did not run), never as coalesced: it was
// given no replay. Before, the cancellation was dropped: the duplicate went on waiting and
// was answered with the replay when the call ended (and counted coalesced).
func TestCancelledWaitingDuplicateGetsNoResponse(t *testing.T) {
	l := newLineRig(t)
	gate := filepath.Join(l.r.dir, "gate")
	args := fmt.Sprintf(`{"ms":1,"tag":"w","until":%q}`, gate)
	l.call(`"leader"`, args)
	waitFor(t, "the call to reach the server", func() bool { return strings.Contains(l.log.String(), "slow tag=w started") })
	l.call(`"dup"`, args)
	waitFor(t, "the duplicate to wait for the call", func() bool { return l.p.Waiting() == 1 })
	l.cancel(`"dup"`)
	waitFor(t, "the cancelled duplicate to stop waiting while the call still runs", func() bool {
		return l.p.Waiting() == 0 && len(l.p.InFlight()) == 1
	})
	if in := l.p.InFlight(); !strings.Contains(in[0], `"leader"`) {
		t.Fatalf("in flight: %v, want the call the duplicate waited on", in)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	leader := l.text(`"leader"`)
	if leader.IsError || leader.replayed() || !strings.HasPrefix(leader.text(), "slow done n=1 ") {
		t.Fatalf("the call: %+v %q, want its execution's result", leader, leader.text())
	}
	if l.settled(`"dup"`) {
		t.Fatalf("the cancelled duplicate was answered: %s", l.raw[l.answerIndex(`"dup"`)])
	}
	l.drained(`"ping"`)
	l.call(`"third"`, args)
	if third := l.text(`"third"`); !third.replayed() || third.text() != leader.text() {
		t.Fatalf("a duplicate after the call: %+v %q, want its replay", third, third.text())
	}
	if n := l.r.effectCount(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	if got, want := l.sinceBoot(), (fence.Counters{Admitted: 1, InFlight: 1, Replayed: 1}); got != want {
		t.Fatalf("counters %s, want %s", got.Line(), want.Line())
	}
	if got, want := strings.Join(l.outcomes(), " "), "refused/intent_in_flight executed/ replayed/"; got != want {
		t.Fatalf("calls observed as %q, want %q", got, want)
	}
}

// A cancellation that names no request being served (an id never used, a tools/call that was
// answered, the initialize) changes nothing: a duplicate waiting meanwhile is answered with the
// replay of the call it waited on (coalesced), and nothing is answered twice.
func TestCancellationOfNoWaitingRequestChangesNothing(t *testing.T) {
	l := newLineRig(t)
	l.call(`"finished"`, `{"ms":1,"tag":"f"}`)
	if x := l.text(`"finished"`); x.IsError {
		t.Fatalf("the first call: %q", x.text())
	}
	gate := filepath.Join(l.r.dir, "gate")
	args := fmt.Sprintf(`{"ms":1,"tag":"w","until":%q}`, gate)
	l.call(`"leader"`, args)
	waitFor(t, "the call to reach the server", func() bool { return strings.Contains(l.log.String(), "slow tag=w started") })
	l.call(`"dup"`, args)
	waitFor(t, "the duplicate to wait for the call", func() bool { return l.p.Waiting() == 1 })
	for _, id := range []string{`"never-sent"`, `"finished"`, `1`, `"Dup"`, `null`} {
		l.cancel(id)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	leader := l.text(`"leader"`)
	// The duplicate's answer is read for itself before drained: in a full CI run it came
	// after the ping's answer, and the test called it unanswered.
	dup := l.text(`"dup"`)
	l.drained(`"ping"`)
	if !dup.replayed() || dup.text() != leader.text() {
		t.Fatalf("the waiting duplicate: %+v %q, want the replay of %q", dup, dup.text(), leader.text())
	}
	answers := map[string]int{}
	for _, m := range l.seen {
		if m["method"] == nil {
			answers[string(m["id"])]++
		}
	}
	for id, n := range answers {
		if n != 1 || id == `"never-sent"` || id == "null" || id == `"Dup"` {
			t.Errorf("%d answers to %s", n, id)
		}
	}
	if n := l.r.effectCount(); n != 2 {
		t.Fatalf("%d executions, want 2", n)
	}
	if got, want := l.sinceBoot(), (fence.Counters{Admitted: 2, Coalesced: 1}); got != want {
		t.Fatalf("counters %s, want %s", got.Line(), want.Line())
	}
}
