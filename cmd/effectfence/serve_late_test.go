package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// serveSession is what an MCP client sends the real binary: the handshake and then calls.
func serveSession(calls ...string) string {
	s := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"
	for _, c := range calls {
		s += c + "\n"
	}
	return s
}

// TestServeLateCommitOfAHashOnlyIntent runs the real binary: an agent prepares an intent with
// keep_result "hash" and its serve process ends before the commit (the intent is unknown); an
// operator clears it with `ledger clear`; then the agent's commit arrives through a new serve
// process with the ticket as it was given. The commit is refused (lease_lost) and kept in the
// audit trail, but only as its result's digest: the result (a secret here) is in none of the
// ledger's files (docs/privacy.md: with keep_result hash the ledger keeps only the SHA-256).
func TestServeLateCommitOfAHashOnlyIntent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	env := []string{"NO_COLOR=1", store.EnvLedger + "=" + path}
	r := runBinary(t, env, serveSession(
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"key:u1","tool":"issue_key","args":{"user":"u1"},"keep_result":"hash"}}}`), "serve")
	var resp struct {
		ID     int `json:"id"`
		Result struct {
			StructuredContent struct {
				Status string          `json:"status"`
				Ticket json.RawMessage `json:"ticket"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	var ticket json.RawMessage
	for line := range strings.SplitSeq(r.stdout, "\n") {
		if json.Unmarshal([]byte(line), &resp) == nil && resp.ID == 1 {
			ticket = resp.Result.StructuredContent.Ticket
		}
	}
	if r.code != exitOK || resp.Result.StructuredContent.Status != "fresh" || !bytes.Contains(ticket, []byte(`"keep_hash":true`)) {
		t.Fatalf("prepare: exit %d, ticket %s\nstdout %s\nstderr %s", r.code, ticket, r.stdout, r.stderr)
	}
	// Cleared while its lease runs and its agent holds the ticket: only --force does that
	// (without it, refused: the agent may still run the effect), which is how a late result
	// comes about.
	if r := runBinary(t, env, "", "ledger", "clear", "key:u1", "--reason", "checked: no key issued"); r.code != exitError || !strings.Contains(r.stderr, "lease of claim") {
		t.Fatalf("ledger clear while the lease runs: exit %d; want refused naming the lease\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runBinary(t, env, "", "ledger", "clear", "key:u1", "--reason", "checked: no key issued", "--force"); r.code != exitOK {
		t.Fatalf("ledger clear: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	const secret = "sk_live_late_0123456789abcdef"
	r = runBinary(t, env, serveSession(
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fence_commit","arguments":{"ticket":`+string(ticket)+`,"result":{"key":"`+secret+`"}}}}`), "serve")
	if r.code != exitOK || !strings.Contains(r.stdout, `"code":"lease_lost"`) {
		t.Fatalf("late commit: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	sum, err := fence.ResultSHA256([]byte(`{"key":"` + secret + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	r = runBinary(t, env, "", "ledger", "show", "key:u1", "--json")
	var d ledger.Detail
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &d) != nil {
		t.Fatalf("ledger show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var kept []fence.Event
	for _, ev := range d.Events {
		if ev.Kind == fence.EventLateResult {
			kept = append(kept, ev)
		}
	}
	if len(kept) != 1 || !strings.Contains(kept[0].Reason, sum) {
		t.Fatalf("late result in the audit trail: %+v; want one with the digest %s", d.Events, sum)
	}
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the result of a keep_result hash intent", f)
		}
	}
}
