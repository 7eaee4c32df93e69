package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestResolveHappenedOfAWrapIntentSaysItsReplayWindow: a wrap killed with SIGKILL mid-call
// leaves its call unknown; the operator finds the charge and resolves it --happened. A wrap
// answers an identical call with a done record only within its replay window from the
// record's time (the resolution), and runs a later one as a new action. The answer of the
// resolve must say so. Before, it said duplicates "do not run, until" the result TTL ended (a
// day on), while a wrap with the default window of 10 minutes ran the identical call again
// ten minutes later (here a window of 1 s: the call after it is admitted and runs).
func TestResolveHappenedOfAWrapIntentSaysItsReplayWindow(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	path, effects := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "effects")
	args := []string{"--ledger", path, "--lease-secs", "1", "--replay-window", "1s", "--", bin, "demo-server", "--latency", "1m", "--effects", effects}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}`
	first, in, _ := startWrapSession(t, dir, args...)
	fmt.Fprintln(in, call)
	claim := waitOneClaim(t, path)
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	for !time.Now().After(claim.LeaseUntil) { // resolve refuses nothing of a lapsed claim
		time.Sleep(50 * time.Millisecond)
	}

	env := []string{store.EnvLedger + "=", store.EnvTTLSecs + "=", "NO_COLOR=1"}
	r := runBinary(t, env, "", "ledger", "resolve", claim.Intent, "--happened", "--ref", "ch_1", "--reason", "charge in the PSP", "--ledger", path)
	if r.code != exitOK {
		t.Fatalf("resolve --happened: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"within its replay window from now (10m0s", "runs as a new action", "at the latest"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("resolve --happened of a wrap intent does not say %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "do not run, until") {
		t.Errorf("resolve --happened of a wrap intent promises no run until the TTL ends:\n%s", r.stdout)
	}

	// What it says is what a wrap does: past the window, the identical call is a new action.
	r = runBinary(t, env, "", "ledger", "show", claim.Intent, "--json", "--ledger", path)
	var d ledger.Detail
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.Record.State != fence.StateDone {
		t.Fatalf("after the resolve: %v %s%s", err, r.stdout, r.stderr)
	}
	for !time.Now().After(d.Record.UpdatedAt.Add(time.Second)) {
		time.Sleep(50 * time.Millisecond)
	}
	_, in, _ = startWrapSession(t, dir, args...)
	fmt.Fprintln(in, call)
	if again := waitOneClaim(t, path); again.Intent != claim.Intent || again.Token == claim.Token {
		t.Fatalf("past the replay window the identical call holds %q claim %d; want a new claim of %q", again.Intent, again.Token, claim.Intent)
	}
}
