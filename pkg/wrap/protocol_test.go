package wrap_test

import (
	"strings"
	"testing"
	"time"
)

// A request wrap cannot accept is answered with its own id when the id was readable, so the
// agent's call ends instead of waiting; invalid JSON gets id null (its id cannot be trusted).
func TestMalformedRequestKeepsItsID(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.rawWrap()
	cases := []struct{ in, want string }{
		{`{"jsonrpc":"1.0","id":41,"method":"ping"}`, `{"jsonrpc":"2.0","id":41,"error":{"code":-32600,`},
		{`{"jsonrpc":"2.0","id":"call-7","method":"tools/call","params":"x"}`, `{"jsonrpc":"2.0","id":"call-7","error":{"code":-32600,`},
		{`{"jsonrpc":"2.0","id":43,"method":""}`, `"id":43,"error":{"code":-32600,`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, `"id":null,"error":{"code":-32600,`},
		{`{"jsonrpc":"2.0","id":44,"method":"ping"`, `"id":null,"error":{"code":-32700,`},
		{`{"jsonrpc":"2.0","id":45,"method":"ping"}`, `{"jsonrpc":"2.0","id":45,"result":{}}`},
	}
	for _, c := range cases {
		if got := rw.roundTrip(t, c.in); !strings.Contains(got, c.want) {
			t.Errorf("%s\n got %s\nwant it to contain %s", c.in, got, c.want)
		}
	}
}

// After the child failed to start, wrap says that, not that initialize was never sent.
func TestAfterAFailedStartWrapSaysWhatFailed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.mode = "exit"
	rw := r.rawWrap()
	if got := rw.roundTrip(t, initLine); !strings.Contains(got, "exit status 3") {
		t.Fatalf("initialize: %s", got)
	}
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`,
	} {
		got := rw.roundTrip(t, line)
		if strings.Contains(got, "has not sent initialize") || !strings.Contains(got, "did not start") || !strings.Contains(got, "exit status 3") {
			t.Errorf("%s\n got %s\nwant the start failure", line, got)
		}
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("%d executions; none may have happened", n)
	}
}

// A cancellation of a pass-through call reaches the child with the agent's reason unchanged,
// and with no reason when the agent gave none.
func TestCancellationReasonIsForwarded(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.initializedRawWrap("--pass", "slow")
	send := func(line string) { t.Helper(); rw.send(t, line) }
	waitLog := func(what string, ok func(string) bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(rw.log.String()); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s; wrap's stderr:\n%s", what, rw.log.String())
			}
		}
	}
	cancelled := func(log string) []string {
		var out []string
		for l := range strings.SplitSeq(log, "\n") {
			if strings.Contains(l, "mcptest: cancelled") {
				out = append(out, l)
			}
		}
		return out
	}
	send(`{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"slow","arguments":{"ms":20000,"tag":"a"}}}`)
	waitLog("the call never reached the child", func(l string) bool { return strings.Contains(l, "mcptest: slow tag=a started") })
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":20,"reason":"user pressed stop ✋"}}`)
	waitLog("the cancellation never reached the child", func(l string) bool { return len(cancelled(l)) == 1 })
	if got := cancelled(rw.log.String())[0]; !strings.Contains(got, `"reason":"user pressed stop ✋"`) {
		t.Errorf("the child got %s; want the agent's reason", got)
	}
	send(`{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"slow","arguments":{"ms":20000,"tag":"b"}}}`)
	waitLog("the second call never reached the child", func(l string) bool { return strings.Contains(l, "mcptest: slow tag=b started") })
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":21}}`)
	waitLog("the second cancellation never reached the child", func(l string) bool { return len(cancelled(l)) == 2 })
	if got := cancelled(rw.log.String())[1]; strings.Contains(got, "reason") {
		t.Errorf("the child got %s; the agent gave no reason", got)
	}
	// Cancelled requests get no answer (MCP); the next request is answered at once.
	if got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":22,"method":"ping"}`); got != `{"jsonrpc":"2.0","id":22,"result":{}}` {
		t.Fatalf("ping after the cancellations: %s", got)
	}
}

// TestToolsCallWithANullIDIsNotRun: a tools/call whose id is null (MCP: a string or a number,
// never null) is answered -32600 under id null and not run. MCP's SDKs do not run it (the
// TypeScript SDK's server drops the line: the real memory server answered nothing and wrote
// nothing), and `serve` refuses it; wrap sent it to the server under an id of its own, the
// call ran, and its answer went to the agent under id null, naming no call of its.
func TestToolsCallWithANullIDIsNotRun(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.initializedRawWrap()
	got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`)
	if !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,`) || !strings.Contains(got, "NOT executed") {
		t.Errorf("a tools/call with id null: %s; want a -32600 error under id null saying it did not run", got)
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("%d executions of the call with id null; want none", n)
	}
	// The same call with an id runs: nothing was claimed for the refused one.
	if got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`); !strings.Contains(got, `"id":2,"result"`) || strings.Contains(got, "effectfence/replayed") {
		t.Fatalf("the call with an id: %s; want it run", got)
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d executions; want 1", n)
	}
}

// TestNotificationWithANullIDIsANotification: a notifications/cancelled written with
// "id": null (JSON-RPC 1.0's form, which mcp-go, go-sdk and Python's SDK read as the
// notification) cancels the pass-through call it names, and nothing is answered for it.
// Before 2026-12-06 wrap took it for a request: it went to the server as a request of its own,
// the server's "method not found" came back to the agent under id null, and the call ran on.
func TestNotificationWithANullIDIsANotification(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.initializedRawWrap("--pass", "slow")
	rw.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{"ms":60000,"tag":"nullid"}}}`)
	waitFor(t, "the call to start in the server", func() bool { return strings.Contains(rw.log.String(), "slow tag=nullid started") })
	rw.send(t, `{"jsonrpc":"2.0","id":null,"method":"notifications/cancelled","params":{"requestId":5,"reason":"gave up"}}`)
	waitFor(t, "the server to be told of the cancellation", func() bool { return strings.Contains(rw.log.String(), "mcptest: cancelled") })
	if got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":6,"method":"ping"}`); !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":6,"result"`) {
		t.Fatalf("the answer after the notification: %s; want the ping's (nothing answers a notification)", got)
	}
}

// TestRequestBesideAnAnswerIsNotRun: a tools/call that also carries "result" (or "error") is
// neither a request nor an answer to MCP's SDKs (the TypeScript SDK drops it, mcp-go takes it
// for an answer): a server runs nothing. Before 2026-12-06 wrap took it for the request and
// ran the charge; it is now refused under its id.
func TestRequestBesideAnAnswerIsNotRun(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.initializedRawWrap()
	got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}},"result":{}}`)
	if !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":7,"error":{"code":-32600,`) {
		t.Errorf("a tools/call beside a result: %s; want -32600 under its id", got)
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("%d executions of the call beside a result; want none", n)
	}
}
