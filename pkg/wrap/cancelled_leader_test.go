package wrap_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// A call that waits for a slot of --max-concurrent and is cancelled by its agent was never
// sent: nothing ran. A duplicate of it (the same call under another id) waiting on that
// attempt is not the one that cancelled: it must not be told "not sent" as if its own call
// had failed. It runs the call instead, once, when a slot frees. Before, the cancelled
// attempt's "not sent" was shared with every duplicate waiting on it (7 runs in 8 here).
func TestDuplicateOfACancelledUnsentCallRunsIt(t *testing.T) {
	r := newRig(t)
	led := r.openLedger()
	log := &logBuf{}
	p, err := wrap.New(wrap.Options{Command: r.childCmd(), Env: r.env(), Engine: led.Engine, Log: log, MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chanSink, 1024)
	p.Attach(out)
	t.Cleanup(func() { p.Stop("test over") })
	// claims counts the ledger's claims in flight.
	claims := func() int {
		n := 0
		_ = led.Engine.Store().View(context.Background(), func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight}}, func(*fence.Record) bool { n++; return true })
		})
		return n
	}
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initNoElicit + `}`))
	answers := map[string]string{}
	next := func(id string) string {
		t.Helper()
		for answers[id] == "" {
			select {
			case line := <-out:
				var m struct {
					ID json.RawMessage `json:"id"`
				}
				_ = json.Unmarshal(line, &m)
				answers[string(m.ID)] = string(line)
			case <-time.After(60 * time.Second):
				t.Fatalf("no answer to %s; log:\n%s", id, log.String())
			}
		}
		return answers[id]
	}
	if a := next("1"); !strings.Contains(a, `"result"`) {
		t.Fatalf("initialize: %s", a)
	}
	// The one slot is taken by a call that lasts until the cancellation below is done.
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"hold","method":"tools/call","params":{"name":"slow","arguments":{"ms":3000,"tag":"hold"}}}`))
	waitFor(t, "the held call to start", func() bool { return strings.Contains(log.String(), "slow tag=hold started") })
	const call = `"method":"tools/call","params":{"name":"slow","arguments":{"ms":1,"tag":"dup"}}}`
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"first",` + call))
	// The first call has claimed the intent (so it leads, and the next is its duplicate) and
	// waits for the slot. Before, only its registration was awaited: the second, dispatched
	// next, sometimes claimed first, and the cancelled first then waited on it as a duplicate
	// and was answered with its replay.
	waitFor(t, "the first call to claim and wait for the slot", func() bool { return len(p.InFlight()) == 2 && claims() == 2 })
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"second",` + call))
	waitFor(t, "the duplicate to wait on it", func() bool { return len(p.InFlight()) == 3 })
	p.Dispatch([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"first"}}`))

	if a := next(`"second"`); !strings.Contains(a, "slow done") || strings.Contains(a, "not sent") {
		t.Fatalf("the duplicate of the cancelled call: %s\nwant the call run for it; log:\n%s", a, log.String())
	}
	if a := answers[`"first"`]; a != "" {
		t.Fatalf("the cancelled call was answered: %s", a)
	}
	if n := strings.Count(log.String(), "slow tag=dup started"); n != 1 {
		t.Fatalf("the call reached the server %d times, want once; log:\n%s", n, log.String())
	}
}
