package httpback

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestConfiguredSessionHeadersAreNotSent: Config.Header's Last-Event-ID, Mcp-Session-Id and
// Mcp-Protocol-Version (a header list copied from a browser's request, say) are not sent;
// the session's own are the transport's. Against the real server-everything: before
// 2026-12-07 a configured Last-Event-ID made the session's first GET a resumption from an
// event the server never sent, which its event store files where nothing is written, and not
// one of the log messages it sends the session (one at once, then one every 5 s) arrived; a
// configured Mcp-Session-Id went with initialize, which the server refused (HTTP 400).
func TestConfiguredSessionHeadersAreNotSent(t *testing.T) {
	t.Parallel()
	e := startEverything(t, 0)
	for _, h := range []http.Header{
		{"Last-Event-Id": {"0b2d6c1e-0000-4000-8000-000000000000"}},
		{"Mcp-Session-Id": {"a-session-of-someone-else"}, "Mcp-Protocol-Version": {"2025-03-26"}},
	} {
		var logs atomic.Int32
		u := upstream(t, e.url(), Config{Init: everythingInit, Header: h, Log: &testLog{t}, OnNotification: func(method string, _ json.RawMessage) {
			if method == "notifications/message" {
				logs.Add(1)
			}
		}})
		s, err := u.Session(context.Background())
		if err != nil {
			t.Fatalf("configured %v: %v", h, err)
		}
		if _, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"toggle-simulated-logging","arguments":{}}`)); err != nil {
			t.Fatalf("configured %v: %v", h, err)
		}
		for deadline := time.Now().Add(time.Minute); logs.Load() == 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("configured %v: no log message of the server's on the session's GET stream in a minute (one at once, then one every 5 s)", h)
			}
		}
		u.Kill()
	}
}
