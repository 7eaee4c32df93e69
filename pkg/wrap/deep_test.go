package wrap_test

import (
	"strconv"
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
	if !strings.Contains(resp, `"id":"deep-1"`) || !strings.Contains(resp, `"code":-32700`) {
		t.Fatalf("the deep call's answer: %.300s; want an error under id deep-1", resp)
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("the refused deep call ran %d times", n)
	}
	if resp := rw.roundTrip(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1}}}`); !strings.Contains(resp, `"id":2`) || strings.Contains(resp, `"error"`) || r.effectCount() != 1 {
		t.Fatalf("the next call: %.300s, %d executions", resp, r.effectCount())
	}
}

// docs/identity.md: arguments nested up to 9,936 levels (fence.MaxNesting) are fenced; deeper
// ones, up to a message of 10,000 levels (the message, its params and the arguments are three
// of them), are answered with a tool error (invalid_request) saying the call was NOT executed;
// a message deeper still is refused with -32700. None of the refused calls runs.
func TestDeepCallBound(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.initializedRawWrap()
	deep := func(id string, amount, n int) string {
		return `{"jsonrpc":"2.0","id":"` + id + `","method":"tools/call","params":{"name":"charge","arguments":{"amount":` + strconv.Itoa(amount) + `,"x":` +
			strings.Repeat("[", n) + strings.Repeat("]", n) + `}}}`
	}
	// The arguments object is one level, the arrays the rest.
	if resp := rw.roundTrip(t, deep("at", 1, 9935)); !strings.Contains(resp, `"id":"at"`) || strings.Contains(resp, `"error"`) || strings.Contains(resp, `"isError":true`) || r.effectCount() != 1 {
		t.Fatalf("arguments of 9,936 levels: %.300s, %d executions; want it run", resp, r.effectCount())
	}
	if resp := rw.roundTrip(t, deep("at-again", 1, 9935)); !strings.Contains(resp, `"effectfence/replayed":true`) || r.effectCount() != 1 {
		t.Fatalf("its duplicate: %.300s, %d executions; want it replayed", resp, r.effectCount())
	}
	for _, n := range []int{9936, 9997} {
		if resp := rw.roundTrip(t, deep("deeper", 2, n)); !strings.Contains(resp, `"effectfence/code":"invalid_request"`) || !strings.Contains(resp, "NOT executed") || r.effectCount() != 1 {
			t.Fatalf("arguments of %d levels: %.300s, %d executions; want invalid_request and nothing run", n+1, resp, r.effectCount())
		}
	}
	if resp := rw.roundTrip(t, deep("beyond", 2, 9998)); !strings.Contains(resp, `"id":"beyond"`) || !strings.Contains(resp, `"code":-32700`) || r.effectCount() != 1 {
		t.Fatalf("a message of 10,001 levels: %.300s, %d executions; want -32700 and nothing run", resp, r.effectCount())
	}
}
