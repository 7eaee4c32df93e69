package serve_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestDeepRequestAnsweredUnderItsID: a request nested deeper than encoding/json reads (10,000
// levels of arrays and objects, the message's own included) is valid JSON whose id can be
// read. mcp-go cannot read it and answered with a parse error under id null, so the client
// (the TypeScript SDK's, say) matched the answer to no request and waited for its own
// timeout; wrap and the gateway answer such a message under its id (TestDeepCallAnsweredUnderItsID
// in pkg/wrap). Now serve does too, runs nothing, and goes on with the next request.
func TestDeepRequestAnsweredUnderItsID(t *testing.T) {
	t.Parallel()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})

	nested := func(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }
	for _, tc := range []struct{ id, line string }{
		// The message, its params, the arguments and args are four levels.
		{`"deep-prepare"`, `{"jsonrpc":"2.0","id":"deep-prepare","method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"pay:deep","tool":"pay","args":{"x":` + nested(9997) + `}}}}`},
		{`7`, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"pay:deep","tool":"pay","args":{"x":` + nested(100_000) + `}}}}`},
		{`"deep-ping"`, `{"jsonrpc":"2.0","id":"deep-ping","method":"ping","params":{"x":` + nested(10_000) + `}}`},
	} {
		refusedUnderItsID(t, c, tc.id, tc.line, -32700)
	}

	// Nothing ran, and the session goes on: the intent is free.
	var p serve.PrepareResult
	if toolResult(t, recv(t, c.send(8, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": map[string]any{"intent": "pay:deep", "tool": "pay", "args": map[string]any{"x": 1}}}), "the next prepare", 30*time.Second), &p) || p.Status != serve.StatusFresh {
		t.Fatalf("after the deep requests: %+v", p)
	}
}

// refusedUnderItsID sends line, a request under id, and fails the test unless it is answered
// with an error of code under that id, saying it was NOT run (an answer under id null, which
// names no request, fails it too).
func refusedUnderItsID(t *testing.T, c *stdioClient, id, line string, code int) {
	t.Helper()
	null := c.waitFor("null")
	defer func() {
		c.mu.Lock()
		delete(c.wait, "null")
		c.mu.Unlock()
	}()
	var raw json.RawMessage
	select {
	case raw = <-c.sendLine(id, line):
	case raw = <-null:
	case <-time.After(30 * time.Second):
		t.Fatalf("no answer to %s within 30s", id)
	}
	var r struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || string(r.ID) != id || r.Error == nil || r.Error.Code != code || !strings.Contains(r.Error.Message, "NOT run") {
		t.Fatalf("%s was answered %.300s; want error %d under its id saying it was NOT run", id, raw, code)
	}
}
