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

// TestFailureIsNotSharedWithAWaiterInAnotherWrap holds what docs/wrap.md says of a definite
// failure and the duplicates waiting on it in another wrap process: two real wrap processes on
// one PostgreSQL ledger, a call failing (isError) in the first while an identical call from
// the second's agent waits for it in the ledger (registered as a waiter, so it did arrive
// while the call was in flight). The ledger records no failure, only that the claim was
// released, so the waiter finds the call free and runs it itself: the tool runs a second
// time, and that run's answer is what the waiter gets, not the first attempt's error (SPEC §6
// says waiters get that same error; wrap keeps that only for the duplicates in its own
// process, which TestIsErrorReleasesAndWaitersShareTheError holds).
func TestFailureIsNotSharedWithAWaiterInAnotherWrap(t *testing.T) {
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
	answers := make(chan result, 2)
	ask := func(w *wrapProc) {
		x, err := callE(w.Session, "fail", args)
		if err != nil {
			t.Error(err)
		}
		answers <- x
	}
	go ask(a)
	waitFor(t, "the first call to reach its server", func() bool { return strings.Contains(a.log.String(), "mcptest: fail tag=shared started") })
	go ask(b)
	waitFor(t, "the duplicate in the other wrap to wait in the ledger", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "psql", os.Getenv("EFFECTFENCE_TEST_POSTGRES"), "-Atc", waiters).Output()
		return err == nil && strings.TrimSpace(string(out)) == "1"
	})
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	one, two := <-answers, <-answers
	// Each wrap has a server of its own: one execution in each, the waiter's by its own wrap.
	runs := mcptest.Effects(r.effects)
	if !one.IsError || !two.IsError || one.replayed() || two.replayed() || len(runs) != 2 || pidOf(runs[0]) == pidOf(runs[1]) {
		t.Fatalf("answers %q and %q, executions %q; want the first attempt's failure and the waiter's own run in the other wrap's server, as docs/wrap.md says", one.text(), two.text(), runs)
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
