package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerCheckAfterAKilledHolderAgreesWithTheViews: a wrap killed with SIGKILL in the
// middle of a call leaves its claim filed in flight. Every open of the ledger but check's
// (ls and show among them) marks it unknown, its holder gone, by the rules a lease is judged
// by; check, which writes nothing, counted it in_flight=1 right after the kill, and ls then
// showed it unknown. Check must count it as the views show it, say why, and still write
// nothing: a second check says the same, and ls then shows what check said.
func TestLedgerCheckAfterAKilledHolderAgreesWithTheViews(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.db")
	wrap, in, _ := startWrapSession(t, dir, "--ledger", ledger, "--lease-secs", "3600", "--", bin, "demo-server", "--latency", "1m", "--effects", filepath.Join(dir, "effects"))
	fmt.Fprintln(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":300}}}`)
	claim := waitClaimLong(t, ledger)
	if err := wrap.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = wrap.Wait()

	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}
	type report struct {
		States   map[string]int
		Outlived []string
	}
	var checks []report
	for range 2 {
		r := runBinary(t, env, "", "ledger", "check", "--json", "--ledger", ledger)
		var rep report
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
			t.Fatalf("ledger check after the kill: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		checks = append(checks, rep)
	}
	for i, rep := range checks {
		if rep.States["in_flight"] != 0 || rep.States["unknown"] != 1 || len(rep.Outlived) != 1 ||
			!strings.Contains(rep.Outlived[0], claim.Intent) || !strings.Contains(rep.Outlived[0], "holder is gone") {
			t.Errorf("ledger check %d after the kill: states %v, outlived %q; want the killed holder's claim counted unknown, saying its holder is gone", i+1, rep.States, rep.Outlived)
		}
	}
	r := runBinary(t, env, "", "ledger", "check", "--ledger", ledger)
	if !strings.Contains(r.stdout, "records: unknown=1;") || !strings.Contains(r.stdout, "note: the claim of intent") {
		t.Errorf("ledger check's text after the kill:\n%s", r.stdout)
	}

	r = runBinary(t, env, "", "ledger", "ls", "--json", "--ledger", ledger)
	var ls struct{ Records []fence.Record }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ls) != nil || len(ls.Records) != 1 {
		t.Fatalf("ledger ls after the kill: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := ls.Records[0]; got.Intent != claim.Intent || got.State != fence.StateUnknown {
		t.Errorf("ledger ls after the kill shows %s %s; check said unknown", got.Intent, got.State)
	}
	if r := runBinary(t, env, "", "ledger", "check", "--json", "--ledger", ledger); !strings.Contains(r.stdout, `"unknown": 1`) || strings.Contains(r.stdout, "outlived") {
		t.Errorf("ledger check once ls marked the claim unknown:\n%s", r.stdout)
	}
}

// waitClaimLong waits, for up to five minutes (race-built processes on a loaded machine), until
// the ledger at path holds one claim in flight, and returns it.
func waitClaimLong(t *testing.T, path string) fence.Record {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		r := runBinary(t, nil, "", "ledger", "ls", "--ledger", path, "--state", "in_flight", "--json")
		var ls struct{ Records []fence.Record }
		if json.Unmarshal([]byte(r.stdout), &ls) == nil && len(ls.Records) == 1 {
			return ls.Records[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call never reached the ledger: %s%s", r.stdout, r.stderr)
		}
	}
}
