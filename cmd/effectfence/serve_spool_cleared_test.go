package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestSpooledCommitDrainedElsewhereAfterAClearSaysWhetherItLanded: a serve process's commit
// reaches PostgreSQL, its answer is lost and the database stays away, so the commit is kept in
// the host's spool (store_error, spooled, executed); the process is killed -9 before the
// database is back. An operator clears the intent (ledger clear --force), and the next serve
// process on the host drains the spool: the commit is refused lease_lost and kept as a late
// result. That process has no doubt of its own to consult, and the late result said "the
// intent's record is unchanged" of a commit that had been recorded. The clear's event names
// the claim and its state: the late result says the earlier attempt was recorded when the
// record was done, and that the record is unchanged when the commit had not landed.
func TestSpooledCommitDrainedElsewhereAfterAClearSaysWhetherItLanded(t *testing.T) {
	t.Parallel()
	// The answer lost is the commit's last round trip, counted on any connection: now and
	// then another the serve process makes comes between, and the commit has not landed (a
	// case checked too) or is answered (a round that proves nothing). Rounds, each on a
	// ledger of its own, until a commit landed.
	for round := 1; ; round++ {
		outcome, late := drainedCommitRound(t)
		switch outcome {
		case "landed":
			if strings.Contains(late, "unchanged") || !strings.Contains(late, "an earlier attempt of this report, whose answer was lost, was recorded before the record changed") {
				t.Fatalf("the late result of a commit that landed before the clear: %s; want it to say the earlier attempt was recorded", late)
			}
			return
		case "not landed":
			if !strings.Contains(late, "the intent's record is unchanged") {
				t.Fatalf("the late result of a commit that had not landed before the clear: %s; want it to say the record is unchanged", late)
			}
		}
		t.Logf("round %d: the commit was %s as its answer was lost; again", round, outcome)
		if round == 4 {
			t.Fatalf("in %d rounds the commit never landed as its answer was lost", round)
		}
	}
}

// drainedCommitRound runs the case on a new ledger: a serve process through a proxy commits
// while the proxy loses the commit's last answer and keeps the database away 8 s, and is
// killed -9 once it answered; the intent is cleared, and a second serve process drains the
// spool. It returns whether the commit had landed ("landed", "not landed", or "answered":
// nothing was spooled) and the late result the drain left.
func drainedCommitRound(t *testing.T) (outcome, late string) {
	t.Helper()
	state := []string{"XDG_STATE_HOME=" + t.TempDir()} // the spool, shared by both processes
	p, through, direct := pgThrough(t, netcut.NewPostgres)
	a := startServeEnv(t, state, "--ledger", through.String())
	// A commit's round trips: commits until two in a row take the same number.
	var n int64
	var seen []int64
	for i := 0; i < 8; i++ {
		w := a.prepare(`{"intent":"warm:` + strconv.Itoa(i) + `","tool":"t"}`)
		before := p.RoundTrips()
		if _, isErr := a.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, w.Ticket)+`,"result":1}`); isErr {
			t.Fatalf("warm-up commit %d refused", i)
		}
		n = p.RoundTrips() - before
		seen = append(seen, n)
		if len(seen) > 1 && seen[len(seen)-2] == n {
			break
		}
	}
	if len(seen) < 2 || seen[len(seen)-2] != n {
		t.Fatalf("commits took %v round trips: never the same twice in a row", seen)
	}
	const intent = "charge:o-drained"
	c := a.prepare(`{"intent":"` + intent + `","tool":"charge_card","args":{"amount":700}}`)
	if c.Status != serve.StatusFresh {
		t.Fatalf("prepare: %+v", c)
	}
	p.LoseAnswer(int(n), 8*time.Second)
	raw, isErr := a.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, c.Ticket)+`,"result":{"charge":"ch_d"}}`)
	a.kill9()
	var r serve.Refusal
	switch {
	case p.Lost() != 1:
		t.Fatalf("no answer was lost")
	case !isErr:
		return "answered", ""
	case json.Unmarshal(raw, &r) != nil || r.Code != fence.CodeStore || r.Spooled == "" || !r.Executed:
		t.Fatalf("the commit whose answer was lost: %s; want its cert, or store_error spooled and executed", raw)
	}
	outcome = "not landed"
	if pgRecords(t, direct, "intent = $1 AND cert_hash IS NOT NULL", intent)() == 1 {
		outcome = "landed"
	}
	if code, out, errOut := runCLI(t, "", "ledger", "clear", intent, "--force", "--reason", "checked the PSP", "--ledger", direct); code != exitOK {
		t.Fatalf("ledger clear = %d %s %s", code, out, errOut)
	}
	// The next serve process on the host drains the spool as it opens the ledger.
	b := startServeEnv(t, state, "--ledger", direct)
	b.prepare(`{"intent":"after","tool":"t"}`) // answered once it has opened the ledger
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		code, out, errOut := runCLI(t, "", "ledger", "show", "--json", "--ledger", direct, intent)
		var shown struct{ Events []fence.Event }
		if code != exitOK || json.Unmarshal([]byte(out), &shown) != nil {
			t.Fatalf("ledger show = %d %s %s", code, out, errOut)
		}
		var lates []string
		for _, ev := range shown.Events {
			if ev.Kind == fence.EventLateResult {
				lates = append(lates, ev.Reason)
			}
		}
		switch {
		case len(lates) == 1:
			return outcome, lates[0]
		case len(lates) > 1:
			t.Fatalf("late results %q; want one", lates)
		case time.Now().After(deadline):
			t.Fatalf("the spooled commit was not drained within 45 s; events %+v\nstderr of the second process:\n%s", shown.Events, b.stderr.String())
		}
	}
}
