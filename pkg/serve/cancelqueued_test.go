package serve_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// A tool call cancelled (notifications/cancelled) while it waits for a slot in its lane runs
// cancelled when the slot comes: a fence_prepare so cancelled hands out no ticket and keeps
// no claim, as one cancelled while it runs. mcp-go knows a call only once it runs and
// ignores a cancellation naming one it does not know: before, a fence_prepare cancelled while
// queued ran later, was admitted, and its fresh ticket went to a client that had dropped the
// request, so the claim stayed in flight, then unknown, fenced for an operator.
func TestCancelledWhileQueuedHandsOutNoTicket(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	started, release := make(chan struct{}), make(chan struct{})
	c := startStdioWith(t, eng, serve.Options{Workers: 1}, func(s *serve.Server) {
		s.MCP().AddTool(mcp.NewTool("block"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			close(started)
			<-release
			return mcp.NewToolResultText("unblocked"), nil
		})
	})
	blocked := holdCallLane(t, c, started)
	prepare := func(id, intent string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"` + intent + `","tool":"t"}}}`
	}
	// The cancellation names the request as its id was sent, or spelled otherwise (a client
	// compares ids as values): before, "\u0071" did not mark request "q", nor 5.0 request 5.
	cancelled := map[string]string{`"q1"`: "pay:queued-1", `9007199254740993`: "pay:queued-2", `"q\udbff"`: "pay:queued-3", `"q"`: "pay:queued-4", `5`: "pay:queued-5"}
	spelled := map[string]string{`"q"`: `"\u0071"`, `5`: `5.0`}
	var answers []<-chan []byte
	for id, intent := range cancelled {
		answers = append(answers, toBytes(c.sendLine(id, prepare(id, intent))))
		as := id
		if s, ok := spelled[id]; ok {
			as = s
		}
		if _, err := c.in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + as + `,"reason":"timeout"}}` + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	kept := c.sendLine(`"q4"`, prepare(`"q4"`, "pay:queued-kept"))
	// The router reads lines in order: once the ping is answered, it has seen every cancellation.
	select {
	case <-c.sendLine(`"sync"`, `{"jsonrpc":"2.0","id":"sync","method":"ping"}`):
	case <-time.After(30 * time.Second):
		t.Fatal("ping not answered")
	}
	close(release)
	for _, ch := range []<-chan []byte{toBytes(blocked), toBytes(kept)} {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("a call that was not cancelled was never answered")
		}
	}
	for _, ch := range answers {
		select {
		case resp := <-ch:
			// A client drops the answer to a request it cancelled; whatever it says, it must
			// not carry a ticket nobody will hold.
			if strings.Contains(string(resp), `"fresh"`) || !strings.Contains(string(resp), `"isError":true`) {
				t.Errorf("a prepare cancelled while queued was answered %s; want a refusal without a ticket", resp)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a prepare cancelled while queued was never answered")
		}
	}
	for _, intent := range cancelled {
		if rec, err := eng.Status(context.Background(), intent); err != nil || rec.State != fence.StateNone {
			t.Errorf("%s: state %s (%v); want none: it was cancelled before it ran, and a claim made for it released", intent, rec.State, err)
		}
	}
	if rec, err := eng.Status(context.Background(), "pay:queued-kept"); err != nil || rec.State != fence.StateInFlight {
		t.Errorf("the queued call nobody cancelled: state %s (%v); want in_flight", rec.State, err)
	}
	// A call cancelled before it ran does not reach the ledger: no claim is made and
	// released for it (which would, in between, hold its intent against other agents).
	st, err := eng.Stats(context.Background())
	if err != nil || st.SinceBoot.Admitted != 1 {
		t.Errorf("admitted since boot: %d (%v); want 1, the call nobody cancelled", st.SinceBoot.Admitted, err)
	}
	for _, intent := range cancelled {
		var kinds []string
		err := eng.Store().View(context.Background(), func(tx fence.Tx) error {
			return tx.Events(intent, func(ev fence.Event) bool { kinds = append(kinds, ev.Kind); return true })
		})
		if err != nil || len(kinds) != 0 {
			t.Errorf("%s, cancelled before it ran, has audit events %v (%v); want none", intent, kinds, err)
		}
	}
}

// toBytes adapts a response channel for a select over several.
func toBytes[T ~[]byte](in <-chan T) <-chan []byte {
	out := make(chan []byte, 1)
	go func() {
		if v, ok := <-in; ok {
			out <- []byte(v)
		}
	}()
	return out
}

// A call cancelled while queued stays cancelled when the client closes its input before the
// call's slot comes: the session has ended by then, which cancels every request's context, and
// a prepare could no longer tell its own cancellation from the session's end, so it was
// admitted and answered fresh, its ticket held by nobody (found in review, 2026-12-05).
func TestCancelledWhileQueuedStaysCancelledAfterInputEnds(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	started := make(chan struct{})
	c := startStdioWith(t, eng, serve.Options{Workers: 1}, func(s *serve.Server) {
		s.MCP().AddTool(mcp.NewTool("block"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			close(started)
			<-ctx.Done() // the session's end: the client closed its input
			return mcp.NewToolResultText("unblocked"), nil
		})
	})
	blocked := holdCallLane(t, c, started) // until the session ends
	queued := c.sendLine(`"q"`, `{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"pay:queued","tool":"t"}}}`)
	if _, err := c.in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"q","reason":"timeout"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.sendLine(`"sync"`, `{"jsonrpc":"2.0","id":"sync","method":"ping"}`): // the cancellation was read
	case <-time.After(30 * time.Second):
		t.Fatal("ping not answered")
	}
	c.in.Close()
	recv(t, blocked, "the blocking call", 30*time.Second)
	resp := recv(t, queued, "the prepare cancelled while queued", 30*time.Second)
	if strings.Contains(string(resp), `"fresh"`) || !strings.Contains(string(resp), `"isError":true`) {
		t.Errorf("a prepare cancelled while queued, its slot coming after the client closed its input, was answered %s; want the cancellation, without a ticket", resp)
	}
	if rec, err := eng.Status(context.Background(), "pay:queued"); err != nil || rec.State != fence.StateNone {
		t.Errorf("pay:queued: state %s (%v); want none", rec.State, err)
	}
}
