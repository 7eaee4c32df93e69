package wrap_test

import (
	"strings"
	"testing"
)

// TestDeepCallAnsweredUnderItsID: a tools/call whose arguments nest 100,000 arrays deep is
// valid JSON that wrap does not read (encoding/json stops at 10,000 levels). It is refused
// and not run, as before; but before, the refusal carried id null (the id was judged
// unreadable), so the agent never learned its call was refused and waited for its own
// timeout. Now the refusal answers the call's id, and the session goes on.
func TestDeepCallAnsweredUnderItsID(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.initializedRawWrap()
	const n = 100_000
	line := `{"jsonrpc":"2.0","id":"deep-1","method":"tools/call","params":{"name":"charge","arguments":{"amount":1,"x":` +
		strings.Repeat("[", n) + strings.Repeat("]", n) + `}}}`
	resp := rw.roundTrip(t, line)
	if !strings.Contains(resp, `"id":"deep-1"`) || !strings.Contains(resp, `"error"`) {
		t.Fatalf("the deep call's answer: %.300s; want an error under id deep-1", resp)
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("the refused deep call ran %d times", n)
	}
	if resp := rw.roundTrip(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1}}}`); !strings.Contains(resp, `"id":2`) || strings.Contains(resp, `"error"`) || r.effectCount() != 1 {
		t.Fatalf("the next call: %.300s, %d executions", resp, r.effectCount())
	}
}
