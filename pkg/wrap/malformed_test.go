package wrap_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A server that answers a fenced call with a line that is not a JSON-RPC response has
// answered: the call is unknown at once, since the tool may have run, instead of waiting for an
// answer that already came until wrap stops. Three such answers: an "error" that is a string,
// an error beside a "Result" (members in another case: encoding/json would read a result
// and an error, our parser neither, so it is refused as read two ways), and an error beside a
// "result" (JSON-RPC forbids both; before, the error won and the call was freed, so a retry
// ran it again although the result said it had happened).
func TestMalformedAnswerIsUnknownAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, args string }{
		{"error not an object", `{"malformed":true,"tag":"m"}`},
		{"read two ways", `{"two_ways":true,"tag":"w"}`},
		{"result beside error", `{"both":true,"tag":"b"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			w := r.wrap()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			raw, err := w.CallTool(ctx, "fail", json.RawMessage(tc.args))
			if err != nil {
				t.Fatalf("no answer to a call the server answered with a malformed line: %v", err)
			}
			var x result
			if err := json.Unmarshal(raw, &x); err != nil {
				t.Fatal(err)
			}
			if !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` || !strings.Contains(x.text(), "not a valid JSON-RPC response") {
				t.Fatalf("want the outcome unknown, naming the malformed answer: %s", raw)
			}
			if n := r.effectCount(); n != 1 {
				t.Fatalf("the tool ran %d times, want 1", n)
			}
			again := call(t, w.Session, "fail", tc.args)
			if !again.IsError || !strings.Contains(again.text(), "NOT executed again") || r.effectCount() != 1 {
				t.Fatalf("a retry must be fenced: %s", again.text())
			}
			// The session goes on.
			if x := call(t, w.Session, "charge", `{"amount":3}`); x.IsError || r.effectCount() != 2 {
				t.Fatalf("a call after the malformed answer: %s", x.text())
			}
		})
	}
}
