package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
)

// TestLedgerResolveRefusesALiveClaim runs the real binary against an intent whose holder (a
// real process) is alive and running the effect: `ledger resolve` refuses every answer with
// exit 1 and not_fenced (docs/ledger.md), and so does `ledger clear` without --force; they
// change nothing, so a duplicate is still refused
// and the effect runs once. A resolve that went through would free the intent (or record it
// done) under a holder that is still running it.
func TestLedgerResolveRefusesALiveClaim(t *testing.T) {
	t.Parallel()
	ledgers := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "ledger.db") },
		"postgres": func(t *testing.T) string { return pgLedger(t) },
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			loc, effects := ledgers[kind](t), filepath.Join(t.TempDir(), "effects")
			h := startHelper(t, "hold", loc, effects)
			if h.line != "admitted" {
				t.Fatalf("holder: %q", h.line)
			}
			defer h.kill9(t)
			env := []string{"NO_COLOR=1"}
			for _, answer := range [][]string{
				{"--did-not-happen"},
				{"--happened", "--ref", "ch_1"},
				{"--leave-fenced"},
			} {
				args := append(append([]string{"ledger", "resolve", "charge:order-7", "--ledger", loc}, answer...), "--reason", "looked in the PSP")
				r := runBinary(t, env, "", args...)
				if r.code != exitError || !strings.Contains(r.stderr, "not_fenced") || !strings.Contains(r.stderr, "holder is running it") {
					t.Errorf("resolve %s of a live claim: exit %d\nstdout %s\nstderr %s", answer[0], r.code, r.stdout, r.stderr)
				}
			}
			r := runBinary(t, env, "", "ledger", "show", "charge:order-7", "--ledger", loc, "--json")
			var d ledger.Detail
			if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &d) != nil || d.Record.State != fence.StateInFlight || len(d.Events) != 0 {
				t.Fatalf("after the refused resolves: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
			// clear refuses it too, unless forced.
			r = runBinary(t, env, "", "ledger", "clear", "charge:order-7", "--ledger", loc, "--reason", "looked in the PSP")
			if r.code != exitError || !strings.Contains(r.stderr, "not_fenced") || !strings.Contains(r.stderr, "--force") {
				t.Errorf("clear of a live claim: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
			if got := startHelper(t, "attempt", loc, effects).wait(t); got != "refused intent_in_flight" {
				t.Fatalf("a duplicate while the holder runs got %q; want refused intent_in_flight", got)
			}
			if n := lines(t, effects); n != 1 {
				t.Fatalf("%d executions; want 1", n)
			}
			r = runBinary(t, env, "", "ledger", "clear", "charge:order-7", "--ledger", loc, "--reason", "the holder is stuck, I checked", "--force")
			if r.code != exitOK || !strings.Contains(r.stdout, "cleared charge:order-7 (was in_flight)") {
				t.Errorf("clear --force of a live claim: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
		})
	}
}
