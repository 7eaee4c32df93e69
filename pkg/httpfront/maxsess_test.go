package httpfront_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// docs/gateway.md, --max-sessions: with -- <command> each session has its own server, so the
// bound bounds the servers. A session the client ended (DELETE) while its call runs keeps its
// server for the call's grace; it counts until it is stopped, so a client that ends each
// session with a call in it and opens another cannot run more servers than the bound.
func TestStoppingSessionsCountTowardMaxSessions(t *testing.T) {
	t.Parallel()
	until := filepath.Join(t.TempDir(), "go-on")
	g := newGW(t, func(c *httpfront.Config, o *wrap.Options) {
		c.MaxSessions = 1
		o.Grace = 10 * time.Minute // the call decides when the stop is over
	})
	// Whatever happens, the call ends before the gateway is closed (its grace is long).
	t.Cleanup(func() { _ = os.WriteFile(until, nil, 0o600) })
	sid := g.open(nil)
	done := make(chan reply, 1)
	go func() {
		r, _ := g.post(context.Background(), sid, nil, call(5, "slow", `{"tag":"held","until":`+strconv.Quote(until)+`}`))
		done <- r
	}()
	waitLog(t, g, "slow tag=held started")
	g.deleteSession(t, sid)
	waitLog(t, g, "waiting up to 10m0s for 1 call") // the session is being stopped
	if r := g.mustPost("", nil, initBody); r.status != http.StatusServiceUnavailable {
		t.Fatalf("initialize while the only session allowed is stopping with its server running: status %d %v, want 503", r.status, r.raw)
	}
	if err := os.WriteFile(until, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := <-done; len(r.msgs) == 0 || !strings.HasPrefix(resultText(t, r.last(t)), "slow done n=1 ") {
		t.Fatalf("the call of the ended session was answered %v, want its result", r.raw)
	}
	// Once stopped, its place is free.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := g.mustPost("", nil, initBody)
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("initialize after the stopped session's call ended: status %d %v, want 200", r.status, r.raw)
		}
	}
}

// MaxSessionsPerPrincipal: one principal that opens sessions in a loop (a runaway agent)
// takes its own places only; another principal still opens its sessions, and a place that
// is given back (DELETE, once its server stopped) can be taken again. Before, MaxSessions
// was the only bound, shared by every principal: alice's loop refused bob's initialize too.
func TestMaxSessionsPerPrincipalLeavesOthersTheirPlaces(t *testing.T) {
	t.Parallel()
	alice, bob := "alice-token-0123456789", "bob-token-0123456789ab"
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) {
		c.Keys = map[string]string{alice: "alice", bob: "bob"}
		c.MaxSessions, c.MaxSessionsPerPrincipal = 4, 2
	})
	ah, bh := hdr{"Authorization": "Bearer " + alice}, hdr{"Authorization": "Bearer " + bob}
	first := g.open(ah)
	g.open(ah)
	r := g.mustPost("", ah, initBody)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("alice's third initialize: status %d %v, want 429 with Retry-After", r.status, r.raw)
	}
	g.open(bh) // bob's places are his own
	g.open(bh)
	if got := g.front.Sessions(); got != 4 {
		t.Fatalf("%d sessions open, want 4", got)
	}
	g.deleteSessionAs(t, first, ah)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := g.mustPost("", ah, initBody)
		if r.status == http.StatusOK {
			break
		}
		// Until the ended session's server has stopped, its place counts, alice's and the
		// gateway's (4 in all: 503).
		if r.status != http.StatusTooManyRequests && r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("alice's initialize after she ended a session: status %d %v, want 200", r.status, r.raw)
		}
	}
}

// docs/gateway.md, --max-sessions-per-principal: a session being stopped counts toward its
// principal's bound until its server is stopped, as it does toward --max-sessions. Here alice
// ends a session with a call still inside it (its server runs the call's grace out), and her
// next initialize is refused 429 until that call has ended, with the gateway far from full.
func TestStoppingSessionsCountTowardTheirPrincipalsBound(t *testing.T) {
	t.Parallel()
	alice := "alice-token-0123456789"
	until := filepath.Join(t.TempDir(), "go-on")
	g := newGW(t, func(c *httpfront.Config, o *wrap.Options) {
		c.Keys = map[string]string{alice: "alice"}
		c.MaxSessions, c.MaxSessionsPerPrincipal = 16, 1
		o.Grace = 10 * time.Minute // the call decides when the stop is over
	})
	t.Cleanup(func() { _ = os.WriteFile(until, nil, 0o600) })
	ah := hdr{"Authorization": "Bearer " + alice}
	sid := g.open(ah)
	done := make(chan reply, 1)
	go func() {
		r, _ := g.post(context.Background(), sid, ah, call(5, "slow", `{"tag":"held","until":`+strconv.Quote(until)+`}`))
		done <- r
	}()
	waitLog(t, g, "slow tag=held started")
	g.deleteSessionAs(t, sid, ah)
	waitLog(t, g, "waiting up to 10m0s for 1 call") // the session is being stopped
	if r := g.mustPost("", ah, initBody); r.status != http.StatusTooManyRequests {
		t.Fatalf("alice's initialize while her only session allowed is stopping with its server running: status %d %v, want 429", r.status, r.raw)
	}
	if err := os.WriteFile(until, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	<-done
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := g.mustPost("", ah, initBody)
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("alice's initialize after the stopped session's call ended: status %d %v, want 200", r.status, r.raw)
		}
	}
}

// docs/gateway.md, --max-sessions: a session being stopped counts until its server is, which
// may take the --grace of a call inside it. A duplicate the session holds, waiting for an
// identical call another session runs, is not inside its server: at the end of the grace it
// is told that it was NOT executed, and the session's place is free. Before, the stop waited
// for the duplicate's whole --wait (here an hour), and with it every initialize was refused.
func TestStoppedSessionsWaitingDuplicateEndsWithTheGrace(t *testing.T) {
	t.Parallel()
	until := filepath.Join(t.TempDir(), "go-on")
	g := newGW(t, func(c *httpfront.Config, o *wrap.Options) {
		c.MaxSessions = 2
		o.Wait = time.Hour
	})
	t.Cleanup(func() { _ = os.WriteFile(until, nil, 0o600) })
	held := call(5, "slow", `{"tag":"held","until":`+strconv.Quote(until)+`}`)
	running, waiting := g.open(nil), g.open(nil)
	go func() { _, _ = g.post(context.Background(), running, nil, held) }()
	waitLog(t, g, "slow tag=held started")
	dup := make(chan reply, 1)
	go func() {
		r, _ := g.post(context.Background(), waiting, nil, held)
		dup <- r
	}()
	for g.inFlight() < 2 { // the duplicate is being served: it waits for the call running
		time.Sleep(20 * time.Millisecond)
	}
	g.deleteSession(t, waiting)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := g.mustPost("", nil, initBody)
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("initialize 30 s after the session holding only a duplicate was ended (grace 300 ms): status %d %v, want 200", r.status, r.raw)
		}
	}
	select {
	case r := <-dup:
		if text := resultText(t, r.last(t)); !strings.Contains(text, "NOT executed") || !strings.Contains(text, "the client ended the session") {
			t.Fatalf("the duplicate of the ended session was answered %q, want that it was NOT executed, the session being ended", text)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the duplicate of the ended session got no answer")
	}
	if n := len(mcptest.Effects(g.effects)); n != 0 {
		t.Fatalf("%d executions, want none (the call is still held)", n)
	}
}
