package httpfront_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// Concurrent initializes cannot open more sessions than MaxSessions (each runs a server
// process of its own): the bound is checked where a session is added, not only before its
// proxy is made. Here every initialize is held where the proxy is made until all have
// passed the first check, as a burst of them may be.
func TestMaxSessionsHoldsUnderConcurrentInitializes(t *testing.T) {
	const max, n = 3, 8
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	led, err := store.Open(context.Background(), store.Options{Ledger: filepath.Join(dir, "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	log := &logBuf{}
	var entered atomic.Int32
	all := make(chan struct{})
	front, err := httpfront.New(httpfront.Config{Log: log, Loopback: true, MaxSessions: max, NewSession: func(httpfront.Caller) (*wrap.Proxy, error) {
		if entered.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(5 * time.Second):
		}
		return wrap.New(wrap.Options{Command: []string{exe, "-test.run=^$"}, Env: mcptest.Env(filepath.Join(dir, "effects"), ""), Engine: led.Engine, Log: log, Grace: 300 * time.Millisecond})
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(front)
	defer srv.Close()
	defer front.Close("test over")
	g := &gw{t: t, url: srv.URL + "/mcp", front: front, log: log}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = g.post(context.Background(), "", nil, initBody)
		}()
	}
	wg.Wait()
	if got := front.Sessions(); got > max {
		t.Fatalf("%d sessions open, want at most MaxSessions (%d)", got, max)
	}
}
