package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// commandLines returns the argv prefix of every command and subcommand, hidden ones included,
// with the command itself.
func commandLines(cmd *cli.Command, prefix []string) [][]string {
	var out [][]string
	for _, sub := range cmd.Commands {
		if sub.Name == "help" {
			continue
		}
		line := append(append([]string{}, prefix...), sub.Name)
		out = append(out, line)
		out = append(out, commandLines(sub, line)...)
	}
	return out
}

// valueFlags returns the flags of cmd whose value is parsed (numbers, durations), where a
// word is a usage error.
func valueFlags(cmd *cli.Command) []string {
	var names []string
	for _, f := range cmd.Flags {
		switch f.(type) {
		case *cli.IntFlag, *cli.Int64Flag, *cli.FloatFlag, *cli.DurationFlag, *cli.UintFlag:
			names = append(names, f.Names()[0])
		}
	}
	return names
}

// TestEveryCommandRefusesABadFlag runs the real binary: every command, with an unknown flag
// and with a word for each numeric flag, must exit 2, write nothing to stdout (under an MCP
// client stdout is the protocol channel), and say what was wrong in one line plus a hint.
func TestEveryCommandRefusesABadFlag(t *testing.T) {
	t.Parallel()
	root := rootCommand(streams{})
	lines := append([][]string{{}}, commandLines(root, nil)...)
	byPath := map[string]*cli.Command{"": root}
	for _, l := range lines[1:] {
		c := root
		for _, name := range l {
			c = c.Command(name)
		}
		byPath[strings.Join(l, " ")] = c
	}
	state := t.TempDir()
	env := []string{"XDG_STATE_HOME=" + state, "EFFECTFENCE_LEDGER="}
	check := func(args []string, want string) {
		t.Helper()
		r := runBinary(t, env, "", args...)
		if r.code != exitUsage || r.stdout != "" {
			t.Errorf("effectfence %s: exit %d, stdout %q; want exit 2 and nothing on stdout", strings.Join(args, " "), r.code, r.stdout)
			return
		}
		msg := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if len(msg) != 2 || !strings.Contains(msg[0], want) || !strings.Contains(msg[1], "--help") {
			t.Errorf("effectfence %s: stderr %q; want one line saying %q and a hint", strings.Join(args, " "), r.stderr, want)
		}
	}
	if len(lines) < 15 {
		t.Fatalf("only %d commands found: %v", len(lines), lines)
	}
	valued := 0
	for _, l := range lines {
		cmd := byPath[strings.Join(l, " ")]
		args := append(append([]string{}, l...), "--no-such-flag")
		if cmd.Name == "wrap" || cmd.Name == "probe" {
			args = append(args, "--", "true")
		}
		check(args, "unknown flag --no-such-flag")
		for _, f := range valueFlags(cmd) {
			check(append(append([]string{}, l...), "--"+f, "abc"), `invalid value "abc" for flag --`+f)
		}
		valued += len(valueFlags(cmd))
	}
	if valued < 10 {
		t.Errorf("only %d numeric flags were tried", valued)
	}
	// A near miss names the flag that was meant.
	check([]string{"wrap", "--fence-read", "--", "true"}, "did you mean --fence-reads?")
	if r := runBinary(t, env, "", "ledger", "ls", "--bogus"); !strings.Contains(r.stderr, "run `effectfence ledger ls --help`") {
		t.Errorf("hint does not name the subcommand: %q", r.stderr)
	}
}

// TestProbeJSONBadFlag runs the real binary: probe --json with a bad flag value or an unknown
// flag, --json before or after it, prints the JSON error object on stdout (code usage, exit 2)
// as for its other usage errors; --json=false, and every other command given --json and a
// bad flag, keep stdout empty.
func TestProbeJSONBadFlag(t *testing.T) {
	t.Parallel()
	env := []string{"XDG_STATE_HOME=" + t.TempDir(), "EFFECTFENCE_LEDGER="}
	for _, args := range [][]string{
		{"probe", "--json", "--calls", "abc", "--tool", "x", "--", "true"},
		{"probe", "--calls", "abc", "--json", "--tool", "x", "--", "true"},
		{"probe", "--json=true", "--timeout", "soon", "--tool", "x", "--", "true"},
		{"probe", "--json", "--no-such-flag", "--tool", "x", "--", "true"},
		{"probe", "--json", "--calls", "0", "--tool", "x", "--", "true"}, // the action's own usage error
	} {
		r := runBinary(t, env, "", args...)
		var doc struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Exit    int    `json:"exit"`
			} `json:"error"`
		}
		if r.code != exitUsage || json.Unmarshal([]byte(r.stdout), &doc) != nil || doc.Error.Code != "usage" || doc.Error.Exit != exitUsage || doc.Error.Message == "" {
			t.Errorf("effectfence %s: exit %d, stdout %q; want exit 2 and the JSON usage error", strings.Join(args, " "), r.code, r.stdout)
		}
		if !strings.Contains(r.stderr, "effectfence probe --help") {
			t.Errorf("effectfence %s: stderr %q; want the line and the hint too", strings.Join(args, " "), r.stderr)
		}
	}
	for _, args := range [][]string{
		{"probe", "--json=false", "--calls", "abc", "--tool", "x", "--", "true"},
		{"probe", "--calls", "abc", "--tool", "x", "--", "true", "--json"},
		{"ledger", "ls", "--json", "--wide=maybe"},
		{"scan", "--json", "--no-such-flag"},
		{"wrap", "--json", "--wait", "abc", "--", "true"},
		{"serve", "--json", "--workers", "abc"},
	} {
		if r := runBinary(t, env, "", args...); r.code != exitUsage || r.stdout != "" {
			t.Errorf("effectfence %s: exit %d, stdout %q; want exit 2 and nothing on stdout", strings.Join(args, " "), r.code, r.stdout)
		}
	}
}
