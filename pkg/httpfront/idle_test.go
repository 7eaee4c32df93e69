package httpfront_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// A session whose agent broke its stream while a fenced call runs is not idle: the call is
// still inside the server, and a broken stream is not a failure (docs/gateway.md). Closing
// the session for --session-idle then would stop its child mid-call and leave the call
// unknown. With an idle limit far shorter than the call, the call finishes, its outcome is
// recorded, and the re-sent call (from a new session, as a client that lost its stream may
// do) receives it. Once the call is over, the session is closed for its idleness.
func TestIdleLimitSparesACallInFlight(t *testing.T) {
	t.Parallel()
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.Idle = 400 * time.Millisecond })
	sid := g.open(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := g.post(ctx, sid, nil, call(20, "slow", `{"ms":3000,"tag":"idle"}`))
		done <- err
	}()
	for !strings.Contains(g.log.String(), "slow tag=idle started") {
		time.Sleep(20 * time.Millisecond)
	}
	cancel() // the stream breaks mid-call; the agent sends nothing more on this session
	<-done
	r := g.mustPost(g.open(nil), nil, call(21, "slow", `{"ms":3000,"tag":"idle"}`))
	text := resultText(t, r.last(t))
	if !strings.HasPrefix(text, "slow done n=1 ") {
		t.Fatalf("the re-sent call was answered %q, want the first execution's result; log:\n%s", text, g.log.String())
	}
	if n := len(mcptest.Effects(g.effects)); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	// Once its call is over, the first session is idle and closed (the log says so; asking
	// it would count as activity), and then unknown to the gateway.
	closed := "session " + sid[:8] + " idle for 400ms: closed"
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(g.log.String(), closed); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the idle session was never closed; log:\n%s", g.log.String())
		}
	}
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":22,"method":"ping"}`); r.status != http.StatusNotFound {
		t.Fatalf("a request on the closed session: status %d, want 404", r.status)
	}
}

// A session is not idle while wrap awaits the final result of one of its tasks either: the
// task-augmented call was answered with its handle at once, but its outcome is the task's
// final result, which wrap fetches and records itself. Against server-everything's
// simulate-research-query (a task of a few seconds) with an idle limit far shorter, the agent
// sending nothing meanwhile: a duplicate from another session receives the final result, not
// an unknown outcome left by a server stopped mid-task.
func TestIdleLimitSparesATaskAwaited(t *testing.T) {
	t.Parallel()
	bin, _ := filepath.Abs("../../.peers/node_modules/.bin/mcp-server-everything")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("skipping: mcp-server-everything is not installed; run scripts/install-peers")
	}
	g := newGW(t, func(c *httpfront.Config, o *wrap.Options) {
		c.Idle = 400 * time.Millisecond
		o.Command = []string{bin}
	})
	const init = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"httpfront-test","version":"1"}}}`
	open := func() string {
		r := g.mustPost("", nil, init)
		sid := r.header.Get("Mcp-Session-Id")
		if r.status != http.StatusOK || sid == "" {
			t.Fatalf("initialize: status %d, body %v", r.status, r.raw)
		}
		g.mustPost(sid, nil, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return sid
	}
	r := g.mustPost(open(), nil, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"simulate-research-query","arguments":{"topic":"idle"},"task":{"ttl":300000}}}`)
	if len(r.raw) == 0 || !strings.Contains(r.raw[len(r.raw)-1], `"taskId"`) {
		t.Fatalf("want a task handle, got %v", r.raw)
	}
	time.Sleep(time.Second) // the first session has been idle past its limit
	d := g.mustPost(open(), nil, call(3, "simulate-research-query", `{"topic":"idle"}`))
	if text := resultText(t, d.last(t)); !strings.Contains(text, "Research Report: idle") {
		t.Fatalf("the duplicate was answered %q, want the task's final result", text)
	}
}

// An idle limit under 4ns (--session-idle 1ns, accepted as positive) is an idle limit like
// any other: sessions are closed once idle, and nothing panics. Before 2026-12-04 the reaper's
// tick, a quarter of the limit, was zero, and time.NewTicker's panic ended the gateway at start.
func TestTinyIdleLimitClosesSessions(t *testing.T) {
	t.Parallel()
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.Idle = 3 * time.Nanosecond })
	r := g.mustPost("", nil, initBody)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: status %d %v", r.status, r.raw)
	}
	closed := "session " + sid[:8] + " idle for 3ns: closed"
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(g.log.String(), closed); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the idle session was never closed; log:\n%s", g.log.String())
		}
	}
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); r.status != http.StatusNotFound {
		t.Fatalf("a request on the closed session: status %d, want 404", r.status)
	}
}
