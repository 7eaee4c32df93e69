package httpfront_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// balanceRuns counts balance's executions, from the server's own record.
func balanceRuns(effects string) int {
	n := 0
	for _, e := range mcptest.Effects(effects) {
		if strings.HasPrefix(e, "balance ") {
			n++
		}
	}
	return n
}

// TestUpstreamRestartedIsJudgedByItsOwnListing: `wrap --upstream` in front of the mcptest
// server over HTTP in its "relisted" mode (tools.listChanged false, no list_changed ever),
// which lists balance read-only: the agent lists, and balance passes through. The server is
// stopped and another started at the same address, which lists balance as a tool that may
// write and does not know the session of the one before (404): wrap initializes a new
// session, and the agent's two identical calls of balance run once, the second replayed, and
// the agent is told notifications/tools/list_changed. Before 2026-12-07 the first server's
// listing judged the new session's calls: balance passed through unfenced and ran twice.
func TestUpstreamRestartedIsJudgedByItsOwnListing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := mcptest.Env(effects, "relisted")
	u, stop := startProcT(t, append(env, mcptest.EnvHTTP+"=127.0.0.1:0"), "mcptest: listening on ", exe, "-test.run=^$")
	t.Cleanup(func() { stop() })
	log := &logBuf{}
	notes := make(chan string, 64)
	agent, err := mcpstdio.Start(context.Background(), mcpstdio.Config{
		Command: []string{binary(t), "wrap", "--ledger", filepath.Join(dir, "ledger.db"), "--scope", "relisted", "--upstream", u},
		Env:     env, Stderr: log, InitTimeout: 60 * time.Second,
		Init:           json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"relisted","version":"1"}}`),
		OnNotification: func(method string, _ json.RawMessage) { notes <- method },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := agent.ListTools(ctx, ""); err != nil {
		t.Fatal(err)
	}
	// balance once the server has taken it: a call refused unsent (the old session's 404, the
	// restart's backoff) is sent again; it ran nowhere.
	balance := func() string {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			res, err := agent.Call(ctx, "tools/call", json.RawMessage(`{"name":"balance","arguments":{}}`))
			got := string(res)
			if err != nil {
				got = "error: " + err.Error()
			}
			if !strings.Contains(got, "not sent") && !strings.Contains(got, "no longer knows the session") || time.Now().After(deadline) {
				return got
			}
		}
	}
	for range 2 {
		if got := balance(); !strings.Contains(got, "balance read") || strings.Contains(got, "effectfence/replayed") {
			t.Fatalf("balance, read-only, of the first server: %s; wrap log:\n%s", got, log.String())
		}
	}
	if n := balanceRuns(effects); n != 2 {
		t.Fatalf("balance, read-only, ran %d times, want 2 (passed through)", n)
	}
	for len(notes) > 0 {
		<-notes
	}

	stop()
	if err := os.WriteFile(effects+mcptest.RelistedSuffix, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	_, stop2 := startProcT(t, append(env, mcptest.EnvHTTP+"="+addr.Host), "mcptest: listening on ", exe, "-test.run=^$")
	t.Cleanup(stop2)
	first, second := balance(), balance()
	if n := balanceRuns(effects); n != 3 {
		t.Fatalf("balance, which the new server lists as a tool that may write, ran %d more times, want 1: %s, then %s; wrap log:\n%s", n-2, first, second, log.String())
	}
	if !strings.Contains(first, "balance read") || strings.Contains(first, "effectfence/replayed") || !strings.Contains(second, `"effectfence/replayed":true`) {
		t.Fatalf("balance of the new server: %s, then %s; want it run, then replayed", first, second)
	}
	for told := false; !told; {
		select {
		case n := <-notes:
			told = n == "notifications/tools/list_changed"
		case <-time.After(30 * time.Second):
			t.Fatalf("the agent was not told notifications/tools/list_changed; wrap log:\n%s", log.String())
		}
	}
}

// TestGatewaySessionsListTheirOwnServers: behind `wrap --listen`, each session has its own
// child and its own listing. Session A's child lists balance read-only (mcptest's "relisted"
// mode); then the file that makes a child list it as a tool that may write is made, and
// session B, whose child starts after, fences balance (run once, replayed) without the agent
// having listed, while A's calls, to its child of before, still pass through.
func TestGatewaySessionsListTheirOwnServers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	led, err := store.Open(context.Background(), store.Options{Ledger: filepath.Join(dir, "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	effects := filepath.Join(dir, "effects")
	g := newGWOn(t, led, effects, func(_ *httpfront.Config, o *wrap.Options) { o.Env = mcptest.Env(effects, "relisted") })
	text := func(sid string, id int) (string, bool) {
		t.Helper()
		m := g.mustPost(sid, nil, call(id, "balance", `{}`)).last(t)
		return resultText(t, m), strings.Contains(string(m["result"]), `"effectfence/replayed":true`)
	}
	a := g.open(nil)
	if r := g.mustPost(a, nil, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); r.status != 200 {
		t.Fatalf("tools/list: %d %v", r.status, r.raw)
	}
	for i := range 2 {
		if got, replayed := text(a, 3+i); !strings.HasPrefix(got, "balance read") || replayed {
			t.Fatalf("balance of A: %s (replayed %v)", got, replayed)
		}
	}
	if err := os.WriteFile(effects+mcptest.RelistedSuffix, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b := g.open(nil)
	if got, replayed := text(b, 2); !strings.HasPrefix(got, "balance read") || replayed {
		t.Fatalf("balance of B, first: %s (replayed %v)", got, replayed)
	}
	if _, replayed := text(b, 3); !replayed {
		t.Fatal("balance of B, a tool that may write to B's child, was not replayed the second time")
	}
	if got, replayed := text(a, 5); !strings.HasPrefix(got, "balance read") || replayed {
		t.Fatalf("balance of A after B: %s (replayed %v), want it passed through to A's child", got, replayed)
	}
	if n := balanceRuns(effects); n != 4 {
		t.Fatalf("balance ran %d times, want 4 (A's three, B's one)", n)
	}
}
