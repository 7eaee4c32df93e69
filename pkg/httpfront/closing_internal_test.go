package httpfront

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// An initialize whose session is being made when the gateway closes is refused (503, the
// gateway is stopping), and the proxy made for it is stopped as an open session's is: Close
// returns only once that Stop has ended, so nothing of the refused session outlives it. Before
// 2026-12-04 open stopped it on a goroutine nothing waited for (go p.Stop), and Close
// returned while it still ran. NewSession is held until Close has begun; stopProxy is held
// until the test has seen whether Close returned.
func TestCloseWaitsForASessionRefusedWhileClosing(t *testing.T) {
	led, err := store.Open(context.Background(), store.Options{Ledger: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	entered, proceed := make(chan struct{}), make(chan struct{})
	stopEntered, stopRelease := make(chan struct{}, 1), make(chan struct{})
	stopped := make(chan struct{})
	old := stopProxy
	stopProxy = func(p *wrap.Proxy, why string) {
		stopEntered <- struct{}{}
		<-stopRelease
		p.Stop(why)
		close(stopped)
	}
	defer func() { stopProxy = old }()
	h, err := New(Config{
		Log: io.Discard, Loopback: true,
		NewSession: func(Caller) (*wrap.Proxy, error) {
			close(entered)
			<-proceed
			return wrap.New(wrap.Options{Command: []string{"true"}, Engine: led.Engine, Log: io.Discard})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
	}()
	<-entered
	closeDone := make(chan struct{})
	go func() { defer close(closeDone); h.Close("test over") }()
	for { // Close has begun: the session being made will find the handler closed
		h.mu.Lock()
		c := h.closed
		h.mu.Unlock()
		if c {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(proceed)
	select {
	case <-closeDone:
		t.Fatal("Close returned before the proxy of the session it refused was stopped")
	case <-stopEntered:
	case <-time.After(30 * time.Second):
		t.Fatal("the refused session's proxy was never stopped")
	}
	select {
	case <-closeDone:
		t.Fatal("Close returned while the refused session's proxy was still being stopped")
	case <-time.After(200 * time.Millisecond):
	}
	close(stopRelease)
	select {
	case <-closeDone:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return once the proxy was stopped")
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Close returned before the proxy's Stop had ended")
	}
	<-posted
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "the gateway is stopping") {
		t.Fatalf("the initialize during Close: %d %s, want 503 (the gateway is stopping)", rec.Code, rec.Body.String())
	}
}
