package main

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestServeRefusesANonLedgerAsUsage: a ledger string that names no supported ledger is a
// usage error (exit 2, with the hint) for serve and for plain `effectfence` run by an MCP
// client, as it is for wrap and every ledger subcommand (README: 2 is a bad flag or
// argument). serve exited 1 with no hint: a script or a supervisor could not tell a typo in
// the config from a ledger that failed. Nothing is written to stdout, the protocol channel.
func TestServeRefusesANonLedgerAsUsage(t *testing.T) {
	for _, ledger := range []string{"redis://localhost:6379", "Memory", "~/l.db"} {
		for _, c := range []struct {
			name string
			env  bool
			args []string
		}{
			{"serve --ledger", false, []string{"serve", "--ledger", ledger}},
			{"serve with " + store.EnvLedger, true, []string{"serve"}},
			{"effectfence with " + store.EnvLedger, true, nil},
		} {
			t.Run(c.name+" "+ledger, func(t *testing.T) {
				if c.env {
					t.Setenv(store.EnvLedger, ledger)
				}
				code, stdout, stderr := runCLI(t, "", c.args...)
				if code != exitUsage || stdout != "" || !strings.Contains(stderr, "supported forms") || !strings.Contains(stderr, "--help` for usage") {
					t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d naming the supported forms and the help", code, stdout, stderr, exitUsage)
				}
			})
		}
	}
}

// TestPolicyUnknownSubcommand: `effectfence policy nosuch` says that policy has no such
// command and names policy's help, as `effectfence ledger nosuch` does; it said "help: no
// command 'nosuch'", a help command the user never typed, and pointed at the root's help.
func TestPolicyUnknownSubcommand(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "policy", "nosuch")
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, `unknown policy command "nosuch"`) || !strings.Contains(stderr, "effectfence policy --help") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ := runCLI(t, "", "policy"); code != exitOK || !strings.Contains(stdout, "check") || !strings.Contains(stdout, "init") {
		t.Fatalf("policy alone: exit %d, stdout %q; want its help", code, stdout)
	}
}
