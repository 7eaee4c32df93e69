package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
	"github.com/effectfence/effectfence/pkg/store"
)

// docs/gateway.md: without --scope, an upstream's scope is derived from its URL and from the
// headers wrap sends it (values hashed, never stored): the account an upstream acts for is in
// its token, as a stdio server's is in its environment. Two wraps of one URL with two
// accounts' tokens, on one ledger, are two servers: an identical call runs on each account,
// and neither is handed the other's receipt. The same token again is the same scope: its
// duplicate is replayed. The upstream is a real gateway that demands bearer keys and passes
// charge_card through unfenced, so its demo server's effects count what reached it.
func TestUpstreamAccountsNeverShareAReceipt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	ledger := filepath.Join(dir, "shared.db")
	up := startGateway(t, "--ledger", "memory", "--listen", "127.0.0.1:0", "--api-keys", keysFile(t), "--pass", "charge_card",
		"--", effectfence(t), "demo-server", "--latency", "1ms", "--effects", effects)
	charge := func(token string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		log := &syncbuf.Buffer{}
		s, err := mcpstdio.Start(ctx, mcpstdio.Config{
			Command: []string{effectfence(t), "wrap", "--ledger", ledger, "--upstream", up.url},
			Env:     append(os.Environ(), "GORACE=atexit_sleep_ms=0", envUpstreamHeaders+"=Authorization: Bearer "+token), Stderr: log, InitTimeout: time.Minute,
		})
		if err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		defer s.Close()
		res, err := s.CallTool(ctx, "charge_card", json.RawMessage(`{"amount":4900,"customer":"cus_1"}`))
		if err != nil || strings.Contains(string(res), `"isError":true`) {
			t.Fatalf("charge_card: %s %v; wrap log:\n%s", res, err, log.String())
		}
		if l := log.String(); strings.Contains(l, token) {
			t.Fatalf("a token reached wrap's log:\n%s", l)
		}
		return string(res)
	}
	if a := charge(aliceToken); strings.Contains(a, "effectfence/replayed") || effectsOf(t, effects) != 1 {
		t.Fatalf("alice's call: %s, %d executions", a, effectsOf(t, effects))
	}
	if b := charge(bobToken); strings.Contains(b, "effectfence/replayed") || effectsOf(t, effects) != 2 {
		t.Fatalf("bob's identical call on his own account: %s, %d executions; want it run, not alice's receipt", b, effectsOf(t, effects))
	}
	if a := charge(aliceToken); !strings.Contains(a, "effectfence/replayed") || effectsOf(t, effects) != 2 {
		t.Fatalf("alice's duplicate from a new process: %s, %d executions; want her receipt", a, effectsOf(t, effects))
	}
}

// A wrap whose upstream scope now counts its headers points at the default ledger its
// configuration had before (the URL's own), where a call it left unknown is still fenced.
func TestUpstreamScopePointsAtTheLedgerBeforeHeaders(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Setenv("EFFECTFENCE_LEDGER", "")
	t.Setenv(envUpstreamHeaders, "Authorization: Bearer "+aliceToken)
	const u = "http://127.0.0.1:1/mcp"
	old := filepath.Join(state, "effectfence", store.UpstreamScope(u, "", nil).LedgerName()+".db")
	wrapLog := func() string {
		var out, errw bytes.Buffer
		if code := run(context.Background(), []string{"effectfence", "wrap", "--upstream", u}, streams{strings.NewReader(""), &out, &errw}); code != 0 {
			t.Fatalf("wrap: exit %d: %s", code, errw.String())
		}
		if strings.Contains(errw.String(), aliceToken) {
			t.Fatalf("a token reached the log: %s", errw.String())
		}
		return errw.String()
	}
	if l := wrapLog(); strings.Contains(l, "from before its headers") {
		t.Fatalf("no earlier ledger, yet: %s", l)
	}
	if err := os.WriteFile(old, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if l := wrapLog(); !strings.Contains(l, "a ledger of this upstream from before its headers were part of the scope exists at "+old) {
		t.Fatalf("the earlier ledger %s is not named: %s", old, l)
	}
}
