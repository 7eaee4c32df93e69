package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerViewsAtRestNameTheClaimsTheNextOpenTakes: read at rest (a full disk, no process
// holding the ledger), nothing is recovered, and a real wrap's claim, killed mid-call, is
// filed in_flight, which check counts unknown (fence.Outlived: the next open marks it so). ls,
// show and stats must say so of that claim on stderr, as check does, naming it; and still show
// (count) it as filed, so that a scan by state reads what the ledger files (ls --state
// in_flight lists it, ls --state unknown does not). Before, the views showed it in_flight
// without a word, and their note said only that nothing was recovered; stats did so until
// 2026-12-07's evening (it counted the claim in_flight, and named nothing).
func TestLedgerViewsAtRestNameTheClaimsTheNextOpenTakes(t *testing.T) {
	t.Parallel()
	fd := killedOnAFullDisk(t, nil)
	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}
	const said = "the next open of the ledger with room to write marks it unknown"
	for _, args := range [][]string{
		{"ls"},
		{"ls", "--json"},
		{"show", fd.claim.Intent},
		{"stats"},
		{"stats", "--json"},
	} {
		r := runBinary(t, env, "", append(append([]string{"ledger"}, args...), "--ledger", fd.ledger)...)
		if r.code != 0 || !strings.Contains(r.stderr, said) || !strings.Contains(r.stderr, fd.claim.Intent) || !strings.Contains(r.stderr, "holder is gone") {
			t.Errorf("ledger %s read at rest: exit %d; want 0, naming the killed call's claim as the next open will mark it\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout, said) {
			t.Errorf("ledger %s read at rest says it on stdout, among what it shows:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
	for state, want := range map[fence.State]int{fence.StateInFlight: 1, fence.StateUnknown: 0} {
		r := runBinary(t, env, "", "ledger", "ls", "--json", "--state", string(state), "--ledger", fd.ledger)
		var ls struct{ Records []fence.Record }
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ls) != nil || len(ls.Records) != want {
			t.Errorf("ledger ls --state %s read at rest: exit %d, %d record(s); want %d, as the ledger files them\n%s%s", state, r.code, len(ls.Records), want, r.stdout, r.stderr)
		}
	}
}
