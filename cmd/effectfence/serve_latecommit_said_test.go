package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestServeRefusedLateCommitSaysWhatWasKept: an agent's serve process is killed (kill -9)
// holding a claim under --on-lease-expiry reclaim; another agent takes the intent over and
// commits. The first agent's late fence_commit, through a new serve process, is refused
// lease_lost and overwrites nothing, and the ledger keeps its result in the audit trail (a
// late_result event: RELIABILITY.md, "When a late result heals"). The refusal told the agent
// "Nothing was recorded", which the engine's own message stopped saying for that reason (a
// holder reads it as its result lost), and nothing about the two effects it reports: its
// effect ran (executed: true) and so did the new holder's. It must say the result is not the
// intent's outcome, that a late result is kept for an operator, not to run the effect again,
// and that a second effect is for a human operator.
func TestServeRefusedLateCommitSaysWhatWasKept(t *testing.T) {
	t.Parallel()
	ledgerPath := filepath.Join(t.TempDir(), "ledger.db")
	const prep = `{"intent":"charge:o-late","tool":"charge_card","args":{"amount":4900}}`
	a := startServe(t, "--ledger", ledgerPath, "--on-lease-expiry", "reclaim")
	first := a.prepare(prep).Ticket
	a.kill9()

	b := startServe(t, "--ledger", ledgerPath, "--on-lease-expiry", "reclaim")
	p := b.prepare(prep)
	if p.Status != serve.StatusFresh || p.Ticket == nil || p.Ticket.Token <= first.Token {
		t.Fatalf("the dead holder's re-run-safe claim: %+v; want it taken over", p.Ticket)
	}
	raw, isErr := b.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_new"}}`)
	if isErr {
		t.Fatalf("the new holder's commit: %s", raw)
	}
	r := b.refused(serve.ToolCommit, `{"ticket":`+ticketJSON(t, first)+`,"result":{"charge":"ch_old_late"}}`)
	if r.Code != fence.CodeLeaseLost || !r.Executed {
		t.Fatalf("the first agent's late commit: %+v; want lease_lost, executed", r)
	}

	code, out, errOut := runCLI(t, "", "ledger", "show", "charge:o-late", "--ledger", ledgerPath, "--json")
	var d ledger.Detail
	if code != exitOK || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("ledger show = %d\n%s%s", code, out, errOut)
	}
	kept := false
	for _, ev := range d.Events {
		kept = kept || (ev.Kind == fence.EventLateResult && strings.Contains(ev.Reason, "ch_old_late"))
	}
	if !kept || d.Record.State != fence.StateDone || d.Record.Token != p.Ticket.Token {
		t.Fatalf("the ledger after the refused late commit: %+v; want the new holder's done record and a late_result event with the late result", d)
	}
	for _, want := range []string{"audit trail", "Do not run the effect again", "second effect", "tell a human operator"} {
		if !strings.Contains(r.Next, want) {
			t.Errorf("next: %s\nwant it to say %q", r.Next, want)
		}
	}
	if strings.Contains(r.Next, "Nothing was recorded") {
		t.Errorf("next: %s\nsays nothing was recorded, but the ledger kept the late result in its audit trail", r.Next)
	}
}
