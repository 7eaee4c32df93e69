package wrap_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestListingOlderThanAChangeDoesNotUndoIt: a tools/list the agent asked for before the server
// sent list_changed, answered with the tools of before the change after wrap's refresh took the
// tools of after, is passed on but not learned. Before 2026-12-06 it was, so balance, which
// the change made a tool that may write, passed unfenced as read-only and ran on every retry.
func TestListingOlderThanAChangeDoesNotUndoIt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.mode = "stalelist"
	w := r.wrap()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := w.Call(ctx, "tools/list", json.RawMessage(`{"_meta":{"hold":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res), `"name":"balance","description":"Reads the balance (read only).","inputSchema":{"type":"object","properties":{}},"annotations":{"readOnlyHint":true}}`) {
		t.Fatalf("the held listing is not the one of before the change: %s", res)
	}
	for range 2 {
		call(t, w.Session, "balance", `{}`)
	}
	if n := r.effectsOf("balance"); n != 1 {
		t.Fatalf("balance, no longer read-only, ran %d times; wrap log:\n%s", n, w.log.String())
	}
}
