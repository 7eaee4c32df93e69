package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerResolveCommitAnswerLost: `ledger resolve --did-not-happen` on PostgreSQL, through
// the rig of TestLedgerClearCommitAnswerLost and against its three adversaries: the answer
// lost and the database away, the command says the outcome is unknown (exit 1) and which
// event tells, never that it failed or succeeded; the answer lost and the database back at
// once, it says resolved (exit 0); the backend terminated before the COMMIT, it says not
// resolved (exit 1), and the intent is fenced as before. Before, the first and last got the
// store's generic message.
func TestLedgerResolveCommitAnswerLost(t *testing.T) {
	tokens := map[string]uint64{}
	h := newHeldCommit(t, "resolve%", func(ctx context.Context, l *store.Ledger) {
		for _, intent := range []string{"unknown", "landed", "aborted"} {
			adm, err := l.Prepare(ctx, fence.Request{Intent: "charge:" + intent, Tool: "charge", Args: []byte(`{}`), Agent: "a"})
			if err != nil {
				t.Fatal(err)
			}
			tokens[intent] = adm.Ticket.Token
			if err := l.Abort(ctx, *adm.Ticket, "the PSP timed out"); err != nil { // fenced: failed
				t.Fatal(err)
			}
		}
	})
	resolve := func(intent string) chan cliResult {
		return h.run("ledger", "resolve", "charge:"+intent, "--did-not-happen", "--reason", "checked the PSP")
	}
	fenced := func(intent string) bool { return h.state("charge:"+intent) == fence.StateFailed }

	lost, landed, aborted := h.adversaries(fence.EventResolveDidNotHappen, resolve)
	if r := lost; r.code != exitError || r.out != "" || !strings.Contains(r.errOut, "the outcome is unknown") || !strings.Contains(r.errOut, `"charge:unknown" may or may not be resolved`) ||
		!strings.Contains(r.errOut, "effectfence ledger show charge:unknown --ledger") || !strings.Contains(r.errOut, "a resolve_did_not_happen event by ") {
		t.Errorf("a resolution whose COMMIT answer was lost: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
	if fenced("unknown") {
		t.Errorf("the resolution committed, but the intent is still fenced")
	}
	// The answer names the claim for a retry; the retry, the database back, says the
	// resolution landed (by this operator's earlier attempt), exit 0, and records nothing more.
	retry := fmt.Sprintf("--claim %d --did-not-happen --reason 'checked the PSP'", tokens["unknown"])
	if !strings.Contains(lost.errOut, "effectfence ledger resolve charge:unknown --ledger ") || !strings.Contains(lost.errOut, retry+": ") {
		t.Errorf("the unknown outcome does not give the retry with its claim (%s):\n%s", retry, lost.errOut)
	}
	again := <-h.run("ledger", "resolve", "charge:unknown", "--claim", fmt.Sprint(tokens["unknown"]), "--did-not-happen", "--reason", "checked the PSP")
	if again.code != exitOK || !strings.Contains(again.out, fmt.Sprintf("already resolved as did not happen: claim %d of charge:unknown was resolved as did not happen by your earlier attempt", tokens["unknown"])) {
		t.Errorf("the retry of a resolution whose answer was lost: exit %d\nstdout %s\nstderr %s", again.code, again.out, again.errOut)
	}
	if r := landed; r.code != exitOK || !strings.Contains(r.out, "resolved charge:landed") || fenced("landed") {
		t.Errorf("a resolution whose COMMIT answer was lost, database reachable: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
	if r := aborted; r.code != exitError || r.out != "" || !strings.Contains(r.errOut, fmt.Sprintf("%q was not resolved", "charge:aborted")) || !fenced("aborted") {
		t.Errorf("a resolution whose transaction was aborted: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
}
