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
	r := newRig(t)
	led := r.openLedger()
	log := &logBuf{}
	p, err := wrap.New(wrap.Options{Command: r.childCmd(), Env: r.env(), Engine: led.Engine, Log: log, MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chanSink, 1024)
	p.Attach(out)
	defer p.Stop("test over")
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
