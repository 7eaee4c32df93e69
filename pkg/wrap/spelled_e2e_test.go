package wrap_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// An agent's tools/list cursor is its "cursor", spelled so, as the TypeScript SDK's server
// reads it. The real server (testdata/paged_server.mjs) lists transfer on both of its pages,
// as it may write on the first and read-only on the second, so wrap keeps it fenced once it
// has seen both. Before 2026-12-07 wrap read the agent's params with encoding/json, which also
// took "Cursor" for the cursor and kept the last: {"cursor":"p2","Cursor":""} was the second
// page to the server and the first to wrap, which replaced what it knew with that page alone,
// and an identical second transfer ran again.
func TestListingCursorIsReadAsTheServerReadsIt(t *testing.T) {
	t.Parallel()
	peers := needPeers(t)
	script, _ := filepath.Abs(filepath.Join("testdata", "paged_server.mjs"))
	r := newRig(t)
	r.childCmdOverride = []string{"node", script}
	r.extraEnv = []string{"PEERS=" + peers, "EFFECTS=" + r.effects}
	w := r.wrap()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct{ params, want string }{
		{`{}`, `"nextCursor":"p2"`},
		{`{"cursor":"p2","Cursor":""}`, `"lookup"`}, // the second page, to the server
	} {
		res, err := w.Call(ctx, "tools/list", json.RawMessage(c.params))
		if err != nil || !strings.Contains(string(res), c.want) {
			t.Fatalf("tools/list %s: %s, %v; want a page holding %s", c.params, res, err, c.want)
		}
	}
	first := call(t, w.Session, "transfer", `{"amount":7}`)
	again := call(t, w.Session, "transfer", `{"amount":7}`)
	if first.IsError || first.replayed() || again.IsError || !again.replayed() {
		t.Fatalf("transfer: %q then %q (replayed %v); want it run once, then replayed", first.text(), again.text(), again.replayed())
	}
	if eff := mcptest.Effects(r.effects); len(eff) != 1 {
		t.Fatalf("the server ran %q, want one transfer", eff)
	}
}
