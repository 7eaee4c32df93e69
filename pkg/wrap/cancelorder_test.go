package wrap_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// chanSink hands each line the proxy writes to the agent to a channel.
type chanSink chan []byte

func (s chanSink) Write(line []byte) error {
	s <- append([]byte(nil), line...)
	return nil
}

// A notifications/cancelled dispatched right after the request it names cancels that
// request, however soon: the request's cancellation is known before the next message is
// handled, not only once the goroutine serving the request has started. A lost cancellation
// let a pass-through call run to its end and be answered, where MCP sends no response.
func TestCancellationRightAfterItsRequest(t *testing.T) {
	p, next := slowPassProxy(t)
	for i := range 5 {
		id := `"c` + string(rune('0'+i)) + `"`
		p.Dispatch([]byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1500,"tag":"t"}}}`))
		p.Dispatch([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}`))
	}
	time.Sleep(2500 * time.Millisecond) // past the end of any call the cancellation missed
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"ping","method":"ping"}`))
	for {
		m := next("ping")
		if string(m["id"]) == `"ping"` {
			break
		}
		if id := string(m["id"]); strings.HasPrefix(id, `"c`) {
			t.Errorf("request %s was answered after its cancellation (the cancellation was lost): %s", id, m["result"])
		}
	}
}

// A notifications/cancelled names its request by the id's value, in any spelling a client's
// JSON library may write it ("\u006b" for "k", 4.0e1 for 40): before, wrap matched the bytes,
// so such a cancellation was lost and the call ran to its end and was answered.
func TestCancellationNamesTheIDByValue(t *testing.T) {
	p, next := slowPassProxy(t)
	for id, as := range map[string]string{`"k"`: `"\u006b"`, `40`: `4.0e1`, `"x\udbff"`: `"\u0078\uDBFF"`} {
		p.Dispatch([]byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1500,"tag":"t"}}}`))
		p.Dispatch([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + as + `}}`))
	}
	// A cancellation naming another id (a lone surrogate of its own) cancels nothing.
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"x\udbfe","method":"tools/call","params":{"name":"slow","arguments":{"ms":1500,"tag":"t"}}}`))
	p.Dispatch([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x\udbfd"}}`))
	time.Sleep(2500 * time.Millisecond) // past the end of any call the cancellation missed
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"ping","method":"ping"}`))
	kept := false
	for {
		m := next("ping")
		id := string(m["id"])
		if id == `"ping"` {
			break
		}
		if id == `"x\udbfe"` {
			kept = true
			continue
		}
		t.Errorf("request %s was answered after its cancellation (the cancellation was lost): %s", id, m["result"])
	}
	if !kept {
		t.Error(`request "x\udbfe", whose id no cancellation named, was not answered`)
	}
}

// The agent's answer to a request of the server's (here roots/list) is matched by the id's
// value: an agent whose JSON library writes wrap's id "effectfence-1" as "\u0065ffectfence-1"
// answered a request wrap then took for never sent, and the server waited in vain.
func TestAgentAnswerMatchesTheIDByValue(t *testing.T) {
	p, out, log := attachedProxy(t, 0)
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initNoElicit + `}`))
	p.Dispatch([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"ask","method":"tools/call","params":{"name":"ask","arguments":{}}}`))
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line := <-out:
			var m map[string]json.RawMessage
			if json.Unmarshal(line, &m) != nil {
				continue
			}
			if string(m["method"]) == `"roots/list"` {
				id := string(m["id"])
				if !strings.HasPrefix(id, `"e`) {
					t.Fatalf("wrap's id %s: the test respells its first letter", id)
				}
				p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"\u0065` + id[2:] + `,"result":{"roots":[{"uri":"file:///respelled"}]}}`))
				continue
			}
			if string(m["id"]) == `"ask"` {
				if !strings.Contains(string(m["result"]), "file:///respelled") {
					t.Fatalf("ask: %s", line)
				}
				return
			}
		case <-deadline:
			t.Fatalf("the call that asked the agent was never answered; log:\n%s", log.String())
		}
	}
}

// slowPassProxy is a proxy, initialized, whose tool "slow" passes through, and next, which
// returns the next message it writes to the agent.
func slowPassProxy(t *testing.T) (*wrap.Proxy, func(what string) map[string]json.RawMessage) {
	t.Helper()
	r := newRig(t)
	led := r.openLedger()
	log := &logBuf{}
	p, err := wrap.New(wrap.Options{Command: r.childCmd(), Env: r.env(), Engine: led.Engine, Log: log, Pass: []string{"slow"}})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chanSink, 64)
	p.Attach(out)
	t.Cleanup(func() { p.Stop("test over") })
	next := func(what string) map[string]json.RawMessage {
		t.Helper()
		select {
		case line := <-out:
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("%s: %s", what, line)
			}
			return m
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer; log:\n%s", what, log.String())
			return nil
		}
	}
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initNoElicit + `}`))
	if m := next("initialize"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	p.Dispatch([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	return p, next
}
