package serve_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/sqlitelock"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// docs/serve.md: settling calls (fence_commit, fence_release, fence_abort, fence_heartbeat)
// have lanes of their own, and while another process holds a SQLite ledger's write lock an
// outcome is answered within its 2 s bound, "for every settling call queued behind it as
// well". A fence_heartbeat had no bound: it waited for the lock up to the store's busy timeout
// (30 s), holding a settle slot all along, so a commit queued behind it was answered only
// after that (and with every slot held by heartbeats, every holder's commit waited). Here,
// with one settle slot: the heartbeat is answered within its bound (store_error: the lease
// was not extended, call again) and so is the commit queued behind it.
func TestHeartbeatWhileTheLedgerIsLockedKeepsItsBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng := fence.New(st, fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{Workers: 1})

	var p serve.PrepareResult
	if toolResult(t, recv(t, c.send(1, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": prepareArgs("charge:hb-locked")}), "prepare", 30*time.Second), &p) || p.Ticket == nil {
		t.Fatalf("prepare: %+v", p)
	}
	unlock := sqlitelock.Hold(t, path)
	start := time.Now()
	hb := c.send(2, "tools/call", map[string]any{"name": serve.ToolHeartbeat, "arguments": map[string]any{"ticket": p.Ticket}})
	commit := c.send(3, "tools/call", map[string]any{"name": serve.ToolCommit, "arguments": map[string]any{"ticket": p.Ticket, "result": "ch_1"}})

	var r serve.Refusal
	if !toolResult(t, recv(t, hb, "the heartbeat while the ledger is locked", 12*time.Second), &r) || r.Code != fence.CodeStore {
		t.Fatalf("heartbeat while the ledger is locked: %+v; want store_error", r)
	}
	t.Logf("heartbeat answered after %s", time.Since(start).Round(time.Millisecond))
	if !toolResult(t, recv(t, commit, "the commit queued behind the heartbeat", 12*time.Second), &r) || r.Code != fence.CodeStore || !r.Executed {
		t.Fatalf("commit while the ledger is locked: %+v; want store_error, executed", r)
	}
	t.Logf("commit answered after %s", time.Since(start).Round(time.Millisecond))
	unlock()

	// Once the lock is given back, the holder heartbeats and commits as usual.
	var h serve.HeartbeatResult
	if toolResult(t, recv(t, c.send(4, "tools/call", map[string]any{"name": serve.ToolHeartbeat, "arguments": map[string]any{"ticket": p.Ticket}}), "heartbeat", 30*time.Second), &h) {
		t.Fatalf("heartbeat after the lock: %+v", h)
	}
	var cr serve.CommitResult
	if toolResult(t, recv(t, c.send(5, "tools/call", map[string]any{"name": serve.ToolCommit, "arguments": map[string]any{"ticket": p.Ticket, "result": "ch_1"}}), "commit", 30*time.Second), &cr) || cr.Cert == nil {
		t.Fatalf("commit after the lock: %+v", cr)
	}
}
