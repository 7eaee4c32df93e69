package wrap_test

import (
	"strings"
	"testing"
	"time"
)

// An agent's response to no request of the server's is logged and ignored; its id, any JSON
// value the agent chose, is logged clipped. Before, the log line held it whole: a 60 MiB id
// wrote a 251 MB line (found through the gateway, which runs the same proxy).
func TestAStrayAnswersIDIsLoggedClipped(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.initializedRawWrap()
	id := `"` + strings.Repeat("x", 1<<20) + `"`
	rw.send(t, `{"jsonrpc":"2.0","id":`+id+`,"result":{}}`)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(rw.log.String(), "that is not waiting") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line of the stray answer:\n%.2000s", rw.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The session goes on, and the log is short.
	if got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); !strings.Contains(got, `"tools"`) {
		t.Fatalf("tools/list after the stray answer: %.300s", got)
	}
	log := rw.log.String()
	if len(log) > 64<<10 || !strings.Contains(log, "(1048578 bytes)") {
		t.Fatalf("the stray answer's id is logged as %d bytes of log; want it clipped, with its length:\n%.1000s", len(log), log)
	}
}
