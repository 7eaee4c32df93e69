//go:build unix

package httpback

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestNotifyDoesNotWaitForTheServer: a notification for the real server-everything, stopped
// (SIGSTOP), is queued and Notify returns; once the server continues it gets the
// notification (roots/list_changed, which it answers by asking for the roots again). Before
// 2026-12-07 Notify returned once the server answered the POST, after 30 s here with
// "context deadline exceeded": the proxy core forwards the agent's notifications as it reads
// the agent's messages, so a stopped upstream held every later message of the agent's 30 s
// per notification (a duplicate that the ledger replays, a ping: seen with the real binary).
func TestNotifyDoesNotWaitForTheServer(t *testing.T) {
	t.Parallel()
	e := startEverything(t, 0)
	var asked atomic.Int32
	init := json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"httpback-test","version":"1"}}`)
	u := upstream(t, e.url(), Config{Init: init, Log: &testLog{t}, OnRequest: func(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
		if method == "roots/list" {
			asked.Add(1)
		}
		return json.RawMessage(`{"roots":[]}`), nil
	}})
	s := session(t, u)
	waitFor := func(n int32, what string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); asked.Load() < n; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the server asked for the roots %d times in a minute; want %d", what, asked.Load(), n)
			}
		}
	}
	waitFor(1, "after initialize")
	if err := e.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			e.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	if err := s.Notify("notifications/roots/list_changed", nil); err != nil {
		t.Fatalf("Notify with the server stopped: %v; want it queued", err)
	}
	if err := e.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	waitFor(2, "after the notification queued while it was stopped")
}
