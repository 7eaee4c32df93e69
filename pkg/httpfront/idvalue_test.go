package httpfront_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// A request keeps its id until it is answered, and "another request under it is refused". The
// id is a value: a client (or an edge that re-encodes JSON) may spell it otherwise, "\u0071"
// for "q" or 5.0 for 5, and the proxy's cancellation table keys it by value
// (jsonrpc.IDKey). A second request under the same id spelled otherwise must be refused as
// the same spelling is; admitted, it runs (a pass-through tool: a second side effect) and
// takes over the first's cancellation entry in the proxy, so a notifications/cancelled for
// the first cancels the second.
func TestHeldIDSpelledOtherwise(t *testing.T) {
	t.Parallel()
	g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) { o.Pass = []string{"slow"} })
	sid := g.open(nil)
	for i, ids := range [][2]string{{`"q"`, `"\u0071"`}, {`5`, `5.0`}, {`7`, `70e-1`}} {
		gate := filepath.Join(t.TempDir(), "gate")
		first := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1,"tag":"held%d","until":%q}}}`, ids[0], i, gate)
		done := make(chan reply, 1)
		go func() {
			r, err := g.post(context.Background(), sid, nil, first)
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		waitLog(t, g, fmt.Sprintf("slow tag=held%d started", i))
		other := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1,"tag":"other%d"}}}`, ids[1], i)
		r := g.mustPost(sid, nil, other)
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		<-done
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw[0], "already in progress") {
			t.Errorf("id %s while request %s is served: status %d %v, want 400 (already in progress)", ids[1], ids[0], r.status, r.raw)
		}
		if strings.Contains(g.log.String(), fmt.Sprintf("slow tag=other%d started", i)) {
			t.Errorf("the request under id %s ran while %s held that id", ids[1], ids[0])
		}
	}
}

// The harm of the above in the proxy: a notifications/cancelled names its request by value.
// With a second request admitted under "q" spelled "\u0071", the proxy's cancellation entry
// for "q" was the second's: the client's cancellation of "q" cancelled the other request, and
// "q" (a pass-through call) ran on to its end and was answered.
func TestCancelReachesTheRequestThatHoldsTheID(t *testing.T) {
	t.Parallel()
	g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) { o.Pass = []string{"slow"} })
	sid := g.open(nil)
	gate := filepath.Join(t.TempDir(), "gate")
	posted := func(id, tag string) chan reply {
		ch := make(chan reply, 1)
		go func() {
			r, err := g.post(context.Background(), sid, nil, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1,"tag":%q,"until":%q}}}`, id, tag, gate))
			if err != nil {
				t.Error(err)
			}
			ch <- r
		}()
		return ch
	}
	first := posted(`"q"`, "first")
	waitLog(t, g, "slow tag=first started")
	second := posted(`"\u0071"`, "second")
	// Refused at once (fixed), or running until the gate opens (before).
	select {
	case <-second:
	case <-waitStarted(g, "slow tag=second started"):
	}
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"q"}}`); r.status != http.StatusAccepted {
		t.Fatalf("cancel: status %d", r.status)
	}
	// The cancelled call gets no response; the gate opens only afterwards, for what still runs.
	var r reply
	select {
	case r = <-first:
	case <-time.After(5 * time.Second):
		_ = os.WriteFile(gate, nil, 0o600)
		r = <-first
	}
	_ = os.WriteFile(gate, nil, 0o600)
	for i, m := range r.msgs {
		if string(m["id"]) == `"q"` {
			t.Fatalf("request \"q\" was answered after the client cancelled it: %s", r.raw[i])
		}
	}
}

func waitStarted(g *gw, what string) chan struct{} {
	ch := make(chan struct{})
	go func() {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if strings.Contains(g.log.String(), what) {
				close(ch)
				return
			}
		}
	}()
	return ch
}
