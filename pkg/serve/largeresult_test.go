package serve_test

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// A fence_commit whose result is longer than a call's arguments may be
// (serve.Options.MaxArgBytes: 64 KiB in the harness, 1 MiB by default) reports an effect that
// ran, whose result cannot be recorded: the refusal says it ran, and not to commit a shortened
// result (every duplicate would receive it as the effect's) but to abort, which fences the
// intent for an operator. Before 2026-12-07 its next said "Fix the arguments as the message
// says and call fence_commit again", and the only fix was a result the effect did not return.
func TestServeCommitOverTheBoundIsToldNotToShortenIt(t *testing.T) {
	h := newHarness(t, fence.Config{})
	var prep serve.PrepareResult
	h.ok(serve.ToolPrepare, map[string]any{"intent": "read:huge", "tool": "fetch_page"}, &prep)
	r := h.refused(serve.ToolCommit, map[string]any{"ticket": prep.Ticket, "result": strings.Repeat("p", 100<<10)})
	if r.Code != fence.CodeInvalid || !r.Executed || strings.Contains(r.Next, "Fix the arguments") || !strings.Contains(r.Next, serve.ToolAbort) {
		t.Fatalf("a commit over the bound: %+v", r)
	}
	// Told so, the agent aborts: the intent is fenced, not left in flight.
	var end serve.EndResult
	h.ok(serve.ToolAbort, map[string]any{"ticket": prep.Ticket, "reason": "it ran; its result was 100 KiB, over serve's bound"}, &end)
	if rec, err := h.eng.Status(t.Context(), "read:huge"); err != nil || rec.State != fence.StateFailed {
		t.Fatalf("after the abort: %+v, %v; want failed", rec, err)
	}
	// A prepare over the bound is still told that nothing ran.
	r = h.refused(serve.ToolPrepare, map[string]any{"intent": "x", "tool": "t", "args": map[string]any{"blob": strings.Repeat("a", 100<<10)}})
	if r.Code != fence.CodeInvalid || r.Executed || !strings.Contains(r.Next, "Nothing ran") {
		t.Fatalf("a prepare over the bound: %+v", r)
	}
}
