package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	h := newHeldCommit(t, "clear", func(ctx context.Context, l *store.Ledger) {
		for _, intent := range []string{"unknown", "landed", "aborted"} {
			if _, err := l.Prepare(ctx, fence.Request{Intent: "charge:" + intent, Tool: "charge", Args: []byte(`{}`), Agent: "a"}); err != nil {
				t.Fatal(err)
			}
		}
	})
	clear := func(intent string) chan cliResult {
		return h.run("ledger", "clear", "charge:"+intent, "--force", "--reason", "checked the PSP")
	}
	inFlight := func(intent string) bool { return h.state("charge:"+intent) == fence.StateInFlight }

	c := clear("unknown")
	h.held()
	h.p.Freeze()
	h.committed("charge:unknown", fence.EventClear)
	h.p.Cut(time.Hour)
	r := <-c
	h.p.Heal()
	t.Logf("answer lost, database away: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	if r.code != exitError || r.out != "" || !strings.Contains(r.errOut, "the outcome is unknown") || !strings.Contains(r.errOut, `"charge:unknown" may or may not be cleared`) ||
		!strings.Contains(r.errOut, "effectfence ledger show charge:unknown --ledger") {
		t.Errorf("a clear whose COMMIT answer was lost: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
	if inFlight("unknown") {
		t.Errorf("the clear committed, but the intent is still held")
	}

	c = clear("landed")
	h.held()
	h.p.Freeze()
	h.committed("charge:landed", fence.EventClear)
	h.p.Cut(0)
	h.p.Heal()
	r = <-c
	if r.code != exitOK || !strings.Contains(r.out, "cleared charge:landed") || inFlight("landed") {
		t.Errorf("a clear whose COMMIT answer was lost, database reachable: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}

	c = clear("aborted")
	pid := h.held()
	if _, err := h.admin.Exec(h.ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	r = <-c
	t.Logf("backend terminated before COMMIT: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	if r.code != exitError || r.out != "" || !strings.Contains(r.errOut, fmt.Sprintf("%q was not cleared", "charge:aborted")) || !inFlight("aborted") {
		t.Errorf("a clear whose transaction was aborted: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
}
