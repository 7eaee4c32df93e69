package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/serve"
)

// TestServeWaitersDoNotStarveTheHolder is issue 11 item 5 through the real MCP SDK client and
// the real binary: 32 waiting fence_prepare calls (as many as the workers) and then the
// holder's heartbeat and commit, on a 2 s lease. The commit lands and every waiter receives
// the holder's cert; none is told "fresh".
func TestServeWaitersDoNotStarveTheHolder(t *testing.T) {
	t.Parallel()
	peers := peersDir(t)
	bin := effectfence(t)
	var rep struct {
		First, Heartbeat, Commit callOutcome
		Waiters                  []callOutcome
	}
	nodeReport(t, "serve_starve.mjs", []string{"PEERS=" + peers, "EF_BIN=" + bin, "EF_LEDGER=" + filepath.Join(t.TempDir(), "server.db"), "GORACE=atexit_sleep_ms=0"}, &rep)
	var first serve.PrepareResult
	if rep.First.IsError || json.Unmarshal(rep.First.JSON, &first) != nil || first.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %s", rep.First.JSON)
	}
	if rep.Heartbeat.IsError || rep.Heartbeat.RPCError != nil {
		t.Fatalf("the holder's heartbeat behind 32 waiters: %+v %s", rep.Heartbeat.RPCError, rep.Heartbeat.JSON)
	}
	var committed serve.CommitResult
	if rep.Commit.IsError || rep.Commit.RPCError != nil || json.Unmarshal(rep.Commit.JSON, &committed) != nil || committed.Cert == nil {
		t.Fatalf("the holder's commit behind 32 waiters: %+v %s", rep.Commit.RPCError, rep.Commit.JSON)
	}
	if len(rep.Waiters) != 32 {
		t.Fatalf("%d waiters answered", len(rep.Waiters))
	}
	for i, w := range rep.Waiters {
		var p serve.PrepareResult
		if w.IsError || w.RPCError != nil || json.Unmarshal(w.JSON, &p) != nil || p.Status != serve.StatusAlreadyDone || p.Cert == nil || p.Cert.Hash != committed.Cert.Hash {
			t.Fatalf("waiter %d: want the holder's cert %s, got %+v %s", i, committed.Cert.Hash, w.RPCError, w.JSON)
		}
	}
}
