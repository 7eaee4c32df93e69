package main

import (
	"os"
	"path/filepath"
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

// TestHelpFlagLinesAreConsistent reads every command's --help: no flag states two defaults
// (wrap --max-conns said "(default: half the open-file limit …) (default: 0)"), and wrap's
// --api-keys takes a FILE, as docs/gateway.md writes it (its placeholder read "--api-keys
// PRINCIPAL TOKEN", two arguments, from the backquoted words of its usage).
func TestHelpFlagLinesAreConsistent(t *testing.T) {
	cmds := [][]string{{"serve"}, {"wrap"}, {"probe"}, {"demo"}, {"scan"}, {"version"}, {"policy", "check"}, {"policy", "init"}}
	for _, sub := range []string{"ls", "show", "clear", "resolve", "verify", "export", "stats", "sweep", "check"} {
		cmds = append(cmds, []string{"ledger", sub})
	}
	for _, c := range cmds {
		code, stdout, stderr := runCLI(t, "", append(c, "--help")...)
		if code != exitOK {
			t.Fatalf("%v --help: exit %d, %s", c, code, stderr)
		}
		for line := range strings.SplitSeq(stdout, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--") && strings.Count(line, "(default") > 1 {
				t.Errorf("effectfence %s --help states two defaults:\n%s", strings.Join(c, " "), line)
			}
			if strings.HasPrefix(strings.TrimSpace(line), "--api-keys ") && !strings.HasPrefix(strings.TrimSpace(line), "--api-keys FILE ") {
				t.Errorf("effectfence %s --help: want --api-keys FILE (docs/gateway.md):\n%s", strings.Join(c, " "), line)
			}
		}
	}
}

// TestColourOnADumbTerminal: every report decides colour alike (colourFor): on a terminal,
// but not with TERM=dumb, which shows escapes as text. probe and demo honoured it; ledger
// and scan, deciding on their own, coloured a dumb terminal.
func TestColourOnADumbTerminal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedHostile(t, path)
	tree := t.TempDir()
	src := "server.tool(\"charge_card\", \"Charge a card\", {amount: z.number()}, async (a) => { await stripe.charges.create(a) })\n"
	if err := os.WriteFile(filepath.Join(tree, "server.ts"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ledger", "ls", "--ledger", path}, {"ledger", "verify", "--ledger", path}, {"scan", tree}} {
		if out := onTerminal(t, []string{"NO_COLOR=", "TERM=xterm"}, args...); !strings.Contains(out, "\x1b[") {
			t.Errorf("%v on a terminal: no colour, so this test proves nothing:\n%q", args, out)
		}
		if out := onTerminal(t, []string{"NO_COLOR=", "TERM=dumb"}, args...); strings.Contains(out, "\x1b[") {
			t.Errorf("%v on a terminal with TERM=dumb: colour escapes:\n%q", args, out)
		}
	}
}

// TestHelpOfAnUnknownCommand: asking for the help of a command that does not exist (`ledger
// purge --help`, `nosuch -h`) is said as the mistyped command is without --help, naming the
// help that lists the commands it was looked for among; it said "help: no command 'purge'",
// a help command the user never typed, and pointed at the root's help for a ledger command.
// `ledger help nosuch` names ledger's help. Nothing reaches stdout; each is a usage error.
func TestHelpOfAnUnknownCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ledger", "purge", "--help"}, "unknown ledger command \"purge\"; run `effectfence ledger --help`"},
		{[]string{"policy", "nosuch", "-h"}, "unknown policy command \"nosuch\"; run `effectfence policy --help`"},
		{[]string{"nosuch", "--help"}, "unknown command \"nosuch\"; run `effectfence --help` to see the commands"},
		{[]string{"ledger", "help", "nosuch"}, "help: no ledger command 'nosuch'; the ledger commands are listed by `effectfence ledger --help`"},
		{[]string{"help", "nosuch"}, "help: no command 'nosuch'; the commands are listed by `effectfence --help`"},
	} {
		code, stdout, stderr := runCLI(t, "", c.args...)
		if code != exitUsage || stdout != "" || stderr != "effectfence: "+c.want+"\n" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, stdout, stderr, exitUsage, c.want)
		}
	}
}

// TestFlagsWinOverABadEnvironment: the README says flags win over the environment. A
// malformed EFFECTFENCE_LEASE_SECS, EFFECTFENCE_RESULT_TTL_SECS or EFFECTFENCE_ON_LEASE_EXPIRY
// stopped wrap and serve (exit 2) even when the flag that replaces it was given, where a
// malformed EFFECTFENCE_LEDGER beside --ledger never did. With the flag the variable is not
// read; without it, it is still a usage error.
func TestFlagsWinOverABadEnvironment(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	for _, c := range []struct {
		env, value, flag, flagValue string
	}{
		{store.EnvLeaseSecs, "NaN", "--lease-secs", "5"},
		{store.EnvTTLSecs, "0.001", "--result-ttl-secs", "9"},
		{store.EnvOnLeaseExpiry, "bogus", "--on-lease-expiry", "reclaim"},
	} {
		for _, cmd := range [][]string{{"serve", "--ledger", "memory"}, {"wrap", "--ledger", "memory"}} {
			t.Run(cmd[0]+" "+c.env, func(t *testing.T) {
				t.Setenv(c.env, c.value)
				args := func(flags ...string) []string {
					a := append(append([]string{}, cmd...), flags...)
					if cmd[0] == "wrap" {
						a = append(a, "--", "true")
					}
					return a
				}
				code, stdout, stderr := runCLI(t, "", args(c.flag, c.flagValue)...)
				if code != exitOK || stdout != "" {
					t.Errorf("%s=%s with %s %s: exit %d, stdout %q, stderr %q; want the flag to win", c.env, c.value, c.flag, c.flagValue, code, stdout, stderr)
				}
				code, stdout, stderr = runCLI(t, "", args()...)
				if code != exitUsage || stdout != "" || !strings.Contains(stderr, c.env) {
					t.Errorf("%s=%s without %s: exit %d, stdout %q, stderr %q; want a usage error naming it", c.env, c.value, c.flag, code, stdout, stderr)
				}
			})
		}
	}
}
