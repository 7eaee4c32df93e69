package serve_test

import (
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// docs/serve.md: a request the client cancels (a fence_prepare waiting with wait_secs) has no
// code of its own; if it is still answered, the code is store_error and next says it was
// cancelled, not that the ledger failed, and to read fence_status before running anything.
// The wait given up on the cancellation was answered with the intent_in_flight refusal it
// waited on, whose next says to call fence_prepare again later.
func TestCancelledWaitIsAnsweredAsTheCancellation(t *testing.T) {
	c, answer := waitBehindHolder(t, "77", 60)
	cancel := []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":77,"reason":"the user gave up"}}` + "\n")
	deadline := time.After(20 * time.Second)
	for {
		// A cancellation that arrives before the request is registered is dropped: repeat it.
		if _, err := c.in.Write(cancel); err != nil {
			t.Fatal(err)
		}
		select {
		case raw := <-answer:
			var r serve.Refusal
			if !toolResult(t, raw, &r) {
				t.Fatalf("the cancelled wait answered without a tool error: %s", raw)
			}
			if r.Code != fence.CodeStore || !strings.Contains(r.Next, "cancelled") || strings.Contains(r.Next, "ledger failed") || !strings.Contains(r.Next, serve.ToolStatus) || r.Executed {
				t.Fatalf("the cancelled wait answered code %q, next %q; want store_error saying it was cancelled and to read %s", r.Code, r.Next, serve.ToolStatus)
			}
			return
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("a prepare waiting up to 60 s was cancelled, but still no answer after 20 s")
		}
	}
}
