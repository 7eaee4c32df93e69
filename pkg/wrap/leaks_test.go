package wrap_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// A fenced call that waits for a slot of --max-concurrent has not been sent, so the agent's
// notifications/cancelled ends it: it is not sent, gets no response (as MCP says), and what
// the proxy kept for it is gone. Before, the call was detached from the cancellation before
// it had a slot: behind a server that never answers, every cancelled call stayed (its
// goroutine, its entries among the requests in flight and their cancellations, its claim,
// heartbeated) until a slot freed, and was then sent although the agent had cancelled it.
func TestCancelledCallWaitingForASlotIsNotKept(t *testing.T) {
	p, out, log := attachedProxy(t, 1)
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initNoElicit + `}`))
	select {
	case line := <-out:
		if !strings.Contains(string(line), `"result"`) {
			t.Fatalf("initialize: %s", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no answer to initialize; log:\n%s", log.String())
	}
	// The one slot is taken by a call the server does not answer for a minute.
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"hold","method":"tools/call","params":{"name":"slow","arguments":{"ms":60000,"tag":"hold"}}}`))
	waitFor(t, "the held call to start", func() bool { return strings.Contains(log.String(), "slow tag=hold started") })
	const n = 20
	for i := range n {
		p.Dispatch([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":"q%d","method":"tools/call","params":{"name":"slow","arguments":{"ms":1,"tag":"q%d"}}}`, i, i)))
	}
	waitFor(t, "the calls to wait for the slot", func() bool { return len(p.InFlight()) == n+1 })
	for i := range n {
		p.Dispatch([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"q%d"}}`, i)))
	}
	waitFor(t, "the cancelled calls to be gone", func() bool { return len(p.InFlight()) == 1 })
	if got := p.InFlight(); !strings.Contains(got[0], `"hold"`) {
		t.Fatalf("in flight: %v, want the held call only", got)
	}
	for {
		select {
		case line := <-out:
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			_ = json.Unmarshal(line, &m)
			if strings.HasPrefix(string(m.ID), `"q`) {
				t.Errorf("a cancelled call was answered: %s", line)
			}
			continue
		default:
		}
		break
	}
	if strings.Contains(log.String(), "slow tag=q") {
		t.Errorf("a cancelled call reached the server; log:\n%s", log.String())
	}
}

// Every per-call structure of the proxy is empty again once its calls have ended, whichever
// way they ended: a result, a replay, coalesced duplicates, isError, a JSON-RPC error,
// input_required, the child dying (unknown) and the refusal after it, a pass-through call,
// a fenced call the agent cancelled mid-call (it is seen through), a request of the server
// answered by the agent, an answer to an id wrap never sent, and a request with an id
// reused while the first is served.
func TestPerCallStateIsEmptyAfterEveryWayACallEnds(t *testing.T) {
	p, out, log := attachedProxy(t, 0)
	answers := make(chan map[string]json.RawMessage, 1024)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			var line []byte
			select {
			case line = <-out:
			case <-stop:
				return
			}
			var m map[string]json.RawMessage
			if json.Unmarshal(line, &m) != nil {
				continue
			}
			if string(m["method"]) == `"roots/list"` { // the server asks the agent
				p.Dispatch([]byte(`{"jsonrpc":"2.0","id":` + string(m["id"]) + `,"result":{"roots":[]}}`))
				continue
			}
			if m["id"] != nil && m["method"] == nil {
				answers <- m
			}
		}
	}()
	want := 0
	send := func(id, method, params string) {
		p.Dispatch([]byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":` + params + `}`))
		want++
	}
	callOf := func(id, tool, args string) { send(id, "tools/call", `{"name":"`+tool+`","arguments":`+args+`}`) }
	wait := func() {
		t.Helper()
		for ; want > 0; want-- {
			select {
			case <-answers:
			case <-time.After(30 * time.Second):
				t.Fatalf("%d answers missing; log:\n%s", want, log.String())
			}
		}
	}
	send("1", "initialize", initNoElicit)
	wait()
	callOf(`"ok"`, "charge", `{"amount":1}`)
	wait()
	callOf(`"replay"`, "charge", `{"amount":1}`)
	for i := range 4 {
		callOf(fmt.Sprintf(`"dup%d"`, i), "slow", `{"ms":300,"tag":"dup"}`)
	}
	callOf(`"iserror"`, "fail", `{"tag":"e"}`)
	callOf(`"rpc"`, "fail", `{"tag":"r","rpc":true}`)
	callOf(`"input"`, "confirm", `{"tag":"i"}`)
	callOf(`"pass"`, "balance", `{}`)
	callOf(`"ask"`, "ask", `{}`)
	callOf(`"cancelled"`, "slow", `{"ms":300,"tag":"c"}`)
	p.Dispatch([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"cancelled"}}`))
	want--                                                                     // a cancelled request gets no response; a fenced one is seen through all the same
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"effectfence-999","result":{}}`)) // never sent
	callOf(`"same"`, "slow", `{"ms":200,"tag":"s1"}`)
	callOf(`"same"`, "slow", `{"ms":100,"tag":"s2"}`)
	wait()
	callOf(`"die"`, "die", `{"tag":"d"}`)
	wait()
	callOf(`"refused"`, "die", `{"tag":"d"}`) // prior_failure, on a restarted child
	wait()
	waitFor(t, "the cancelled call to be seen through", func() bool { return strings.Contains(log.String(), "slow tag=c") || len(p.InFlight()) == 0 })
	waitFor(t, "every call to end", func() bool { return len(p.InFlight()) == 0 })
	for what, n := range p.StateSizes() {
		if n != 0 {
			t.Errorf("%s: %d entries left after every call ended", what, n)
		}
	}
}

// The tasks wrap answers itself (a task-augmented duplicate answered with a replay) are
// bounded by the bytes of their results, not only by their number, and an expired one is
// dropped when the next is made, not only when it is asked for. Before, 1,024 of them were
// kept whatever their size (a replay of a 64 MiB result each), each for as long as it was
// among the last 1,024, expired or not.
func TestLocalTasksAreBoundedInBytesAndExpire(t *testing.T) {
	const bound = 1 << 20
	p, out, log := attachedProxy(t, 0)
	next := 0
	send := func(method, params string) map[string]json.RawMessage {
		t.Helper()
		next++
		p.Dispatch([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"%s","params":%s}`, next, method, params)))
		for {
			select {
			case line := <-out:
				var m map[string]json.RawMessage
				if json.Unmarshal(line, &m) == nil && string(m["id"]) == fmt.Sprint(next) {
					if m["result"] == nil {
						t.Fatalf("%s: %s", method, line)
					}
					return m
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: no answer; log:\n%s", method, log.String())
			}
		}
	}
	send("initialize", initNoElicit)
	text := strings.Repeat("x", 256<<10)
	call := `{"name":"echo","arguments":{"text":"` + text + `"}`
	send("tools/call", call+`}`) // runs and is recorded
	task := func(ttl int) {
		t.Helper()
		if m := send("tools/call", call+fmt.Sprintf(`,"task":{"ttl":%d}}`, ttl)); !strings.Contains(string(m["result"]), "effectfence-task-") {
			t.Fatalf("a task-augmented duplicate was not answered with a local task: %.300s", m["result"])
		}
	}
	for range 5 {
		task(1)
	}
	time.Sleep(10 * time.Millisecond) // past their ttl of 1 ms
	task(60000)
	if n, _ := p.LocalTasks(); n != 1 {
		t.Errorf("%d local tasks kept, want 1: the expired ones dropped", n)
	}
	defer wrap.SetMaxLocalTaskBytes(bound)()
	for range 40 {
		task(60000)
	}
	if n, b := p.LocalTasks(); b > bound+300<<10 {
		t.Errorf("%d local tasks hold %d bytes of results, want at most the bound (%d) and the newest", n, b, bound)
	}
}

// attachedProxy starts a proxy over the test server, with a SQLite ledger and the given
// --max-concurrent (0: the default), attached to a sink the test reads; it stops with the test.
func attachedProxy(t *testing.T, maxConcurrent int) (*wrap.Proxy, chanSink, *logBuf) {
	t.Helper()
	r := newRig(t)
	led := r.openLedger()
	log := &logBuf{}
	p, err := wrap.New(wrap.Options{Command: r.childCmd(), Env: r.env(), Engine: led.Engine, Log: log, MaxConcurrent: maxConcurrent})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chanSink, 1024)
	p.Attach(out)
	t.Cleanup(func() { p.Stop("test over") })
	return p, out, log
}

// TestTaskWaitEndsWithItsTTL: a fenced task whose final result never comes (the server's
// tasks/result never answers) is waited for as long as the server keeps the result (its ttl)
// and a grace, then its outcome is unknown: the flight, heartbeat and goroutine go, and a
// duplicate is told the call may have run and is not run again. Before, all of it stayed for
// the session's life and duplicates waited on it.
func TestTaskWaitEndsWithItsTTL(t *testing.T) {
	defer wrap.SetTaskGrace(200 * time.Millisecond)()
	p, out, log := attachedProxy(t, 0)
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"test-agent","version":"1"}}}`))
	next := func(what string) string {
		t.Helper()
		select {
		case line := <-out:
			return string(line)
		case <-time.After(30 * time.Second):
			t.Fatalf("no answer to %s; log:\n%s", what, log.String())
			return ""
		}
	}
	if got := next("initialize"); !strings.Contains(got, `"result"`) {
		t.Fatalf("initialize: %s", got)
	}
	call := `"method":"tools/call","params":{"name":"slow","arguments":{"tag":"stuck"},"task":{"ttl":300}}}`
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":2,` + call))
	if got := next("the task-augmented call"); !strings.Contains(got, `"taskId":"stuck-`) {
		t.Fatalf("want the server's task handle, got %s", got)
	}
	waitFor(t, "the task's wait to end", func() bool { return p.StateSizes()["flights"] == 0 })
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","arguments":{"tag":"stuck"}}}`))
	if got := next("the duplicate"); !strings.Contains(got, `"isError":true`) || !strings.Contains(got, "unknown") {
		t.Fatalf("want the duplicate refused as of unknown outcome, got %s", got)
	}
	if n := strings.Count(log.String(), "slow task tag=stuck started"); n != 1 {
		t.Fatalf("the task ran %d times", n)
	}
}
