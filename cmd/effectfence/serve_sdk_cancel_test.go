package main

import (
	"path/filepath"
	"testing"
)

// TestServeSDKCancellation: the real MCP TypeScript SDK cancels serve's calls (an AbortSignal,
// which it sends as notifications/cancelled naming its own request id). serve gives every
// request an id of its own before mcp-go sees it and maps the cancellation onto it, so the
// chain is checked with the client users run: a prepare waiting on a held intent lets go of the
// wait lane's one slot (else the next waiting prepare, queued behind it, is not answered within
// its 20 s), and a prepare cancelled while queued behind it is not admitted (its intent stays
// unknown to the ledger, with nobody holding a ticket for it).
func TestServeSDKCancellation(t *testing.T) {
	t.Parallel()
	peers := peersDir(t)
	bin := effectfence(t)
	var rep struct {
		Held, Waiter, Behind, Sync, QueuedStatus, HeldStatus, Commit struct {
			IsError  bool `json:"isError"`
			RPCError *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"rpcError"`
			JSON struct {
				Status string `json:"status"`
				Intent struct {
					State string `json:"state"`
				} `json:"intent"` // fence_status
			} `json:"json"`
		}
	}
	stdout, stderr := nodeReport(t, "serve_cancel.mjs", []string{"PEERS=" + peers, "EF_BIN=" + bin, "EF_LEDGER=" + filepath.Join(t.TempDir(), "ledger.db")}, &rep)
	if rep.Held.JSON.Status != "fresh" {
		t.Fatalf("the holder's prepare: %s", stdout)
	}
	if rep.Waiter.RPCError == nil || rep.Behind.RPCError == nil {
		t.Fatalf("the SDK did not report the aborted calls as aborted: %s", stdout)
	}
	if rep.Sync.RPCError != nil || rep.Sync.JSON.Status != "fresh" {
		t.Errorf("the prepare queued behind the cancelled waiter: %s; want it answered fresh (the cancellation freed the slot)\nstderr:\n%s", stdout, stderr)
	}
	if rep.QueuedStatus.JSON.Intent.State != "none" {
		t.Errorf("the prepare cancelled while queued left its intent %q; want none: it was cancelled before it ran\n%s", rep.QueuedStatus.JSON.Intent.State, stdout)
	}
	if rep.HeldStatus.JSON.Intent.State != "in_flight" || rep.Commit.IsError || rep.Commit.RPCError != nil {
		t.Errorf("the holder's intent %q, its commit %s", rep.HeldStatus.JSON.Intent.State, stdout)
	}
}
