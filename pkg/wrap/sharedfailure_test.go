package wrap_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// TestFailureIsSharedWithAWaiterInAnotherWrap holds SPEC §6 (waiters of a definite failure
// get that same failure) across processes: two real wrap processes on one PostgreSQL ledger,
// a call failing (isError) in the first while an identical call from the second's agent
// waits for it in the ledger (registered as a waiter, so it did arrive while the call was in
// flight). The waiter is told that the call it waited for failed, and why, and that it was
// NOT executed: the tool ran once. Before 2026-12-06 the ledger kept only that the claim was
// released, so the waiter found the call free and ran it in its own server (wrap shared the
// failure only with the duplicates in its own process, which
// TestIsErrorReleasesAndWaitersShareTheError holds). The intent is free: a retry runs it.
func TestFailureIsSharedWithAWaiterInAnotherWrap(t *testing.T) {
	t.Parallel()
	_, ledger := cutLedger(t)
	u, err := url.Parse(ledger)
	if err != nil {
		t.Fatal(err)
	}
	waiters := fmt.Sprintf("SELECT count(*) FROM %s.effectfence_waiters", u.Query().Get("search_path"))
	r := newRig(t)
	r.ledger = ledger
	a, b := r.wrap(), r.wrap()
	gate := filepath.Join(r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"shared","until":%q}`, gate)
	answers := answerInBackground(t, a, "fail", args)
	waitFor(t, "the first call to reach its server", func() bool { return strings.Contains(a.log.String(), "mcptest: fail tag=shared started") })
	waited := answerInBackground(t, b, "fail", args)
	waitForOneWaiter(t, waiters)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	first, dup := <-answers, <-waited
	runs := mcptest.Effects(r.effects)
	if !first.IsError || first.replayed() || len(runs) != 1 {
		t.Fatalf("the first call %q, executions %q; want its failure and one execution", first.text(), runs)
	}
	if !dup.IsError || dup.replayed() || !strings.Contains(dup.text(), "NOT executed a second time") || !strings.Contains(dup.text(), "isError") || string(dup.Meta["effectfence/code"]) != `"`+fence.CodeFailedWait+`"` {
		t.Fatalf("the waiter in the other wrap: %q (meta %v); want told the call it waited for failed (isError), NOT executed, code %s", dup.text(), dup.Meta, fence.CodeFailedWait)
	}
	if n := len(mcptest.Effects(r.effects)); n != 1 {
		t.Fatalf("%d executions after the waiter was answered, want 1", n)
	}
	// The intent is free: a retry through the second wrap runs the call (the gate is open).
	again, err := callE(b.Session, "fail", args)
	if err != nil {
		t.Fatal(err)
	}
	if runs := mcptest.Effects(r.effects); !again.IsError || again.replayed() || len(runs) != 2 || pidOf(runs[0]) == pidOf(runs[1]) {
		t.Fatalf("a retry after the shared failure: %q, executions %q; want it run in the second wrap's server", again.text(), runs)
	}
}

// pidOf is the pid=N field of a line of the effects file.
func pidOf(line string) string {
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "pid=") {
			return f
		}
	}
	return ""
}

// A duplicate given the failure of the attempt it waited for in the same wrap is answered
// with that very failure and did not run: the engine counts it refused in flight (docs/
// gateway.md's effectfence_fence_attempts_total), and Observe sees it coalesced with the
// failure's code.
func TestWaiterGivenTheFailureCountsRefusedInFlight(t *testing.T) {
	l := newLineRig(t)
	gate := filepath.Join(l.r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"shared","until":%q}`, gate)
	l.send(`{"jsonrpc":"2.0","id":"first","method":"tools/call","params":{"name":"fail","arguments":` + args + `}}`)
	waitFor(t, "the first call to reach its server", func() bool { return strings.Contains(l.log.String(), "mcptest: fail tag=shared started") })
	l.send(`{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":{"name":"fail","arguments":` + args + `}}`)
	waitFor(t, "the duplicate to wait for the first call", func() bool { return l.p.Waiting() == 1 })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	first, dup := l.text(`"first"`), l.text(`"dup"`)
	if !first.IsError || dup.text() != first.text() || l.r.effectCount() != 1 {
		t.Fatalf("the call %q, its duplicate %q, %d executions; want one failure, shared", first.text(), dup.text(), l.r.effectCount())
	}
	if got, want := l.sinceBoot(), (fence.Counters{Admitted: 1, InFlight: 1}); got != want {
		t.Fatalf("counters %s, want %s", got.Line(), want.Line())
	}
	seen := l.outcomes()
	sort.Strings(seen) // the two end at about the same time, in either order
	if got, want := strings.Join(seen, " "), "coalesced/is_error executed/is_error"; got != want {
		t.Fatalf("calls observed as %q, want %q", got, want)
	}
}

// TestFailureIsSharedAfterASpoolDrain: a waiter refused as unknown that asks the ledger again
// because the outcome it lacked waited in the spool (Engine.DrainedFor) is still a waiter of
// the claim it waited on. Two wraps on one PostgreSQL ledger and one state directory (so one
// spool): the first's connections to the database are cut while its call fails (isError), so
// its failure waits in the spool and its lease (3 s) lapses; the second's duplicate, waiting
// in the ledger, is refused unknown, records what the spool holds (the failure, which heals
// the claim) and asks again. It is given the failure it waited for (waited_attempt_failed),
// NOT executed: the tool ran once. Before, the second ask knew nothing of the wait, found the
// intent free and ran the call in the second wrap's server.
func TestFailureIsSharedAfterASpoolDrain(t *testing.T) {
	t.Parallel()
	cut, ledger := cutLedger(t)
	u, err := url.Parse(ledger)
	if err != nil {
		t.Fatal(err)
	}
	waiters := fmt.Sprintf("SELECT count(*) FROM %s.effectfence_waiters", u.Query().Get("search_path"))
	base, err := url.Parse(os.Getenv("EFFECTFENCE_TEST_POSTGRES"))
	if err != nil {
		t.Fatal(err)
	}
	direct := *u
	direct.Host = base.Host // the same database and schema, not through the proxy
	r := newRig(t)
	r.ledger = ledger
	a := r.wrap("--lease-secs", "3")
	r.ledger = direct.String()
	b := r.wrap("--lease-secs", "3")
	gate := filepath.Join(r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"drained","until":%q}`, gate)
	answers := answerInBackground(t, a, "fail", args)
	waitFor(t, "the first call to reach its server", func() bool { return strings.Contains(a.log.String(), "mcptest: fail tag=drained started") })
	waited := answerInBackground(t, b, "fail", args)
	waitForOneWaiter(t, waiters)
	cut.Cut(2 * time.Minute)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var dup result
	select {
	case dup = <-waited:
	case <-time.After(90 * time.Second):
		t.Fatalf("the duplicate was not answered; its log:\n%s", b.log.String())
	}
	cut.Heal()
	first := <-answers
	if runs := mcptest.Effects(r.effects); !first.IsError || len(runs) != 1 || !dup.IsError || string(dup.Meta["effectfence/code"]) != `"`+fence.CodeFailedWait+`"` || !strings.Contains(dup.text(), "NOT executed a second time") {
		t.Fatalf("the first call %q; the duplicate %q (meta %v); executions %q; want one execution, its failure shared (%s), NOT executed; the first wrap's log:\n%s\nthe second's:\n%s",
			first.text(), dup.text(), dup.Meta, runs, fence.CodeFailedWait, a.log.String(), b.log.String())
	}
}

// answerInBackground calls tool with args through w; the answer comes on the channel.
func answerInBackground(t *testing.T, w *wrapProc, tool, args string) <-chan result {
	answer := make(chan result, 1)
	go func() {
		x, err := callE(w.Session, tool, args)
		if err != nil {
			t.Error(err)
		}
		answer <- x
	}()
	return answer
}

// waitForOneWaiter waits until the PostgreSQL query count (of the ledger's
// effectfence_waiters) answers 1: a duplicate waits in the ledger.
func waitForOneWaiter(t *testing.T, count string) {
	t.Helper()
	waitFor(t, "the duplicate in the other wrap to wait in the ledger", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "psql", os.Getenv("EFFECTFENCE_TEST_POSTGRES"), "-Atc", count).Output()
		return err == nil && strings.TrimSpace(string(out)) == "1"
	})
}
