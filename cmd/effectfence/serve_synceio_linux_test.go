package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestServePrepareWhoseSyncFailedIsFreshAfterAKill: the fsync of a real serve's claim fails
// (EIO, strace), so fence_prepare is answered store_error, not admitted, and the agent holds
// no ticket. SQLite wrote the claim's frames to the log all the same; serve killed (kill -9)
// before it writes again leaves them for the next open. The next serve's prepare of the intent
// must be admitted fresh: before 2026-12-07 it was refused as of unknown outcome, its holder
// gone, though nothing had run (the engine now notes such a claim in the spool, and the next
// process releases it).
func TestServePrepareWhoseSyncFailedIsFreshAfterAKill(t *testing.T) {
	t.Parallel()
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	a := startServe(t, "--ledger", ledger)
	if p := a.prepare(`{"intent":"warm","tool":"t"}`); p.Status != serve.StatusFresh {
		t.Fatalf("warm-up prepare: %+v", p)
	}
	const prep = `{"intent":"charge:sync-failed","tool":"charge","args":{"amount":5}}`
	stop := diskfull.FailSyncs(t, a.cmd.Process.Pid)
	raw, isErr := a.call(serve.ToolPrepare, prep)
	var r serve.Refusal
	if !isErr || json.Unmarshal(raw, &r) != nil || r.Code != fence.CodeStore {
		t.Fatalf("fence_prepare whose claim's fsync failed: %s; want store_error", raw)
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	stop()

	b := startServe(t, "--ledger", ledger)
	raw, isErr = b.call(serve.ToolPrepare, prep)
	var p serve.PrepareResult
	if isErr || json.Unmarshal(raw, &p) != nil || p.Status != serve.StatusFresh {
		t.Fatalf("fence_prepare in the next serve, after a kill -9: %s; want fresh (nothing ran)", raw)
	}
}
