package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerClearCommitAnswerLost: `ledger clear` on PostgreSQL through a proxy, with a
// trigger that holds the clear's transaction for a moment after its COMMIT was sent (the
// clear's batch, COMMIT included, is on the server). Three adversaries:
//   - the proxy holds the answer, the transaction commits, then the proxy drops every
//     connection and refuses new ones: the clear happened and the database cannot be asked;
//     the command says the outcome is unknown (exit 1) and how to find it out, never that the
//     clear failed or succeeded;
//   - the same, the database reachable again at once: the store learns the commit landed, and
//     the command says cleared (exit 0);
//   - the backend is terminated (pg_terminate_backend) while the transaction is held: it
//     aborts; the command says the intent was not cleared (exit 1), and it is not.
func TestLedgerClearCommitAnswerLost(t *testing.T) {
	tokens := map[string]uint64{}
	h := newHeldCommit(t, "clear", func(ctx context.Context, l *store.Ledger) {
		for _, intent := range []string{"unknown", "landed", "aborted"} {
			adm, err := l.Prepare(ctx, fence.Request{Intent: "charge:" + intent, Tool: "charge", Args: []byte(`{}`), Agent: "a"})
			if err != nil {
				t.Fatal(err)
			}
			tokens[intent] = adm.Ticket.Token
		}
	})
	clear := func(intent string) chan cliResult {
		return h.run("ledger", "clear", "charge:"+intent, "--force", "--reason", "checked the PSP")
	}
	inFlight := func(intent string) bool { return h.state("charge:"+intent) == fence.StateInFlight }

	lost, landed, aborted := h.adversaries(fence.EventClear, clear)
	if r := lost; r.code != exitError || r.out != "" || !strings.Contains(r.errOut, "the outcome is unknown") || !strings.Contains(r.errOut, `"charge:unknown" may or may not be cleared`) ||
		!strings.Contains(r.errOut, "effectfence ledger show charge:unknown --ledger") {
		t.Errorf("a clear whose COMMIT answer was lost: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
	if inFlight("unknown") {
		t.Errorf("the clear committed, but the intent is still held")
	}
	// The answer names the claim for a retry; the retry, the database back, says the clear
	// landed (by this operator's earlier attempt), exit 0, and clears nothing more.
	retry := fmt.Sprintf("--claim %d --force --reason 'checked the PSP'", tokens["unknown"])
	if !strings.Contains(lost.errOut, "effectfence ledger clear charge:unknown --ledger ") || !strings.Contains(lost.errOut, retry+": ") {
		t.Errorf("the unknown outcome does not give the retry with its claim (%s):\n%s", retry, lost.errOut)
	}
	again := <-h.run("ledger", "clear", "charge:unknown", "--claim", fmt.Sprint(tokens["unknown"]), "--force", "--reason", "checked the PSP")
	if again.code != exitOK || !strings.Contains(again.out, fmt.Sprintf("already cleared: claim %d of charge:unknown was cleared by your earlier attempt", tokens["unknown"])) {
		t.Errorf("the retry of a clear whose answer was lost: exit %d\nstdout %s\nstderr %s", again.code, again.out, again.errOut)
	}
	if r := landed; r.code != exitOK || !strings.Contains(r.out, "cleared charge:landed") || inFlight("landed") {
		t.Errorf("a clear whose COMMIT answer was lost, database reachable: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
	if r := aborted; r.code != exitError || r.out != "" || !strings.Contains(r.errOut, fmt.Sprintf("%q was not cleared", "charge:aborted")) || !inFlight("aborted") {
		t.Errorf("a clear whose transaction was aborted: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
}
