//go:build unix

package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/ledgerturn"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// A serve process holding a claim is stopped (SIGSTOP) while another agent, through another
// serve process, waits for the claim's outcome (wait_secs 30). The wait ends once the lease
// lapses, with the intent unknown and healable, not after 30 s: a stalled holder cannot hold
// its waiters (RELIABILITY.md, "When a late result heals"). After SIGCONT the holder's commit
// heals the intent and the waiter's retry receives its result.
func TestServeWaiterOnAStoppedHolderEndsWithTheLease(t *testing.T) {
	t.Parallel()
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	const prep = `{"intent":"charge:o-3","tool":"charge_card","args":{"amount":4900}}`
	a := startServe(t, "--ledger", ledger, "--lease-secs", "2")
	b := startServe(t, "--ledger", ledger, "--lease-secs", "2")
	p := a.prepare(prep)
	// Stopped inside its call, not inside a transaction of its own (ledgerturn.StopOutsideTurn).
	if _, err := ledgerturn.StopOutsideTurn(a.cmd.Process.Pid, ledger); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })

	start := time.Now()
	r := b.refused(serve.ToolPrepare, `{"intent":"charge:o-3","tool":"charge_card","args":{"amount":4900},"wait_secs":30}`)
	took := time.Since(start)
	if r.Code != fence.CodePriorFailure || r.State != fence.StateUnknown {
		t.Fatalf("a waiter on a stopped holder: %+v; want prior_failure, unknown", r)
	}
	if since := time.Since(p.Ticket.LeaseUntil); took > 10*time.Second || since < 0 {
		t.Fatalf("the waiter was answered after waiting %s, %s after the lease lapsed; want soon after it lapsed", took, since)
	}

	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	raw, isErr := a.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_3"}}`)
	var c serve.CommitResult
	if isErr || json.Unmarshal(raw, &c) != nil || c.Cert == nil {
		t.Fatalf("the resumed holder's commit: %s", raw)
	}
	if d := b.prepare(`{"intent":"charge:o-3","tool":"charge_card","args":{"amount":4900},"wait_secs":30}`); d.Status != serve.StatusAlreadyDone || d.Cert == nil || d.Cert.Hash != c.Cert.Hash {
		t.Fatalf("the waiter's retry after the heal: %+v", d)
	}
}

// docs/serve.md and ledger.md: a claim of a serve process that still runs is never freed
// without --force, even past its lease: its agent may be running the effect. `ledger clear`
// refuses it (exit 1, naming the process and --force); --force clears it.
func TestLedgerClearOfALiveServeClaimNeedsForce(t *testing.T) {
	t.Parallel()
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	a := startServe(t, "--ledger", ledger, "--lease-secs", "1")
	p := a.prepare(`{"intent":"charge:o-9","tool":"charge_card","args":{"amount":4900}}`)
	for !time.Now().After(p.Ticket.LeaseUntil.Add(100 * time.Millisecond)) {
		time.Sleep(50 * time.Millisecond)
	}
	r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "clear", "charge:o-9", "--reason", "the agent is gone", "--ledger", ledger)
	if r.code != 1 || !strings.Contains(r.stderr, "still runs on this host") || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("clear of a live serve process's claim past its lease: exit %d\n%s%s\nwant exit 1 naming the process and --force", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "clear", "charge:o-9", "--reason", "the agent is gone", "--force", "--ledger", ledger)
	if r.code != 0 || !strings.Contains(r.stdout, "cleared charge:o-9") {
		t.Fatalf("clear --force: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
