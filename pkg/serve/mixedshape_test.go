package serve_test

import (
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestRequestBesideAnAnswerIsAnsweredUnderItsID: a message that carries "method" beside
// "result" or "error" is neither a request nor an answer. mcp-go took it for an answer and
// dropped it, so its client waited for its own timeout (hostile review, 2026-12-06); it is now
// refused under its id, not run, and the session goes on.
func TestRequestBesideAnAnswerIsAnsweredUnderItsID(t *testing.T) {
	t.Parallel()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	for _, tc := range []struct{ id, line string }{
		{`"r1"`, `{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"pay:mixed","tool":"pay","args":{"x":1}}},"result":{}}`},
		{`2`, `{"jsonrpc":"2.0","id":2,"method":"ping","error":{"code":1,"message":"m"}}`},
	} {
		refusedUnderItsID(t, c, tc.id, tc.line, -32600)
	}
	// Nothing ran: the intent is free.
	var p serve.PrepareResult
	if toolResult(t, recv(t, c.send(3, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": map[string]any{"intent": "pay:mixed", "tool": "pay", "args": map[string]any{"x": 1}}}), "the next prepare", 30*time.Second), &p) || p.Status != serve.StatusFresh {
		t.Fatalf("after the mixed messages: %+v", p)
	}
}
