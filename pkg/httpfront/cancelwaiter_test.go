package httpfront_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// Over HTTP as over stdio (one core): a duplicate that waits for the call it duplicates and
// that its agent cancels stops waiting, and its POST ends with no response; the call it waited
// on runs once to its end and is answered, a later duplicate replays it, and the cancelled one
// counts as refused in flight, not as coalesced. Before, the duplicate's POST stayed open
// until the call ended and then carried the replay.
func TestCancelledWaitingDuplicateGetsNoResponse(t *testing.T) {
	t.Parallel()
	// Duplicates wait as long as a test may take: only the cancellation ends this wait.
	g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) { o.Wait = time.Hour })
	sid := g.open(nil)
	gate := filepath.Join(t.TempDir(), "gate")
	args := fmt.Sprintf(`{"ms":1,"tag":"hw","until":%q}`, gate)
	posted := func(id int) chan reply {
		ch := make(chan reply, 1)
		go func() {
			r, err := g.post(context.Background(), sid, nil, call(id, "slow", args))
			if err != nil {
				t.Error(err)
			}
			ch <- r
		}()
		return ch
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	leader := posted(80)
	waitLog(t, g, "slow tag=hw started")
	dup := posted(81)
	// The duplicate is being served (so its cancellation is known); the call holds the intent.
	waitFor("the duplicate to wait for the call", func() bool { return g.inFlight() == 2 })
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":81,"reason":"the user gave up"}}`); r.status != http.StatusAccepted {
		t.Fatalf("cancel: status %d", r.status)
	}
	select {
	case r := <-dup:
		for i, m := range r.msgs {
			if string(m["id"]) == "81" {
				t.Fatalf("the cancelled duplicate was answered: %s", r.raw[i])
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled duplicate's stream stayed open while the call it waited on runs")
	}
	waitFor("the duplicate's request to end, the call still running", func() bool { return g.inFlight() == 1 })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var text string
	select {
	case r := <-leader:
		if text = resultText(t, r.last(t)); !strings.HasPrefix(text, "slow done n=1 ") {
			t.Fatalf("the call was answered %q, want its execution's result", text)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call the duplicate waited on was never answered")
	}
	third := (<-posted(82)).last(t)
	var res struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	_ = json.Unmarshal(third["result"], &res)
	if got := resultText(t, third); got != text || string(res.Meta[wrap.MetaReplayed]) != "true" {
		t.Fatalf("a duplicate after the call was answered %s, want the replay of %q", third["result"], text)
	}
	if n := len(mcptest.Effects(g.effects)); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	st, err := g.led.Engine.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (fence.Counters{Admitted: 1, InFlight: 1, Replayed: 1}); st.SinceBoot != want {
		t.Fatalf("counters %s, want %s", st.SinceBoot.Line(), want.Line())
	}
}
