package main

import (
	"strings"
	"testing"
)

// TestLedgerLookAtAMemoryLedgerIsRefused: a memory ledger lives inside the process that uses
// it, so `effectfence ledger` (another process) opening "memory" would read a new, empty one
// and report nothing fenced with exit 0, whatever the wrap or serve using one had fenced (a
// silent zero; docs/ledger.md). Every subcommand but check refuses it, given by --ledger, by
// EFFECTFENCE_LEDGER, or through --for when wrap was given it: exit 1, nothing on stdout, a
// line that says why. check says what a memory ledger is and exits 0.
func TestLedgerLookAtAMemoryLedgerIsRefused(t *testing.T) {
	t.Parallel()
	subs := [][]string{
		{"ls"}, {"ls", "--json"}, {"show", "charge:1"}, {"verify"}, {"export"}, {"stats", "--json"}, {"sweep"},
		{"clear", "charge:1", "--reason", "checked"},
		{"resolve", "charge:1", "--did-not-happen", "--reason", "checked"},
	}
	for _, how := range []struct {
		env  []string
		args []string
	}{
		{[]string{"EFFECTFENCE_LEDGER="}, []string{"--ledger", "memory"}},
		{[]string{"EFFECTFENCE_LEDGER=memory"}, nil},
		{[]string{"EFFECTFENCE_LEDGER=memory"}, []string{"--for", "--", "npx", "-y", "@modelcontextprotocol/server-memory"}},
	} {
		for _, sub := range subs {
			args := append(append([]string{"ledger"}, sub...), how.args...)
			r := runBinary(t, append([]string{"NO_COLOR=1"}, how.env...), "", args...)
			if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "a memory ledger lives inside the one process that uses it") {
				t.Errorf("%v %q: exit %d\nstdout %q\nstderr %s", how.env, args[1:], r.code, r.stdout, r.stderr)
			}
		}
	}
	r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "check", "--ledger", "memory")
	if r.code != exitOK || !strings.Contains(r.stdout, "lives and dies with its process") {
		t.Errorf("check of memory: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}
