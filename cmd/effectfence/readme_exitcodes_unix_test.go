//go:build unix

package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// readmeExitCodes returns the README's "## Exit codes" table: code -> meaning.
func readmeExitCodes(t *testing.T) map[int]string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(readme), "\n## Exit codes\n")
	if !ok {
		t.Fatal(`README.md has no "## Exit codes"`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	rows := map[int]string{}
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \| (.+) \|$`).FindAllStringSubmatch(sec, -1) {
		n, _ := strconv.Atoi(m[1])
		rows[n] = m[2]
	}
	return rows
}

// TestReadmeExitCodes runs the real binary once for every meaning the README's exit-code table
// gives, as a user would meet it: each case names the words of its row it stands for, so a row
// reworded (or a code added) without a case here fails. Usage errors (2) also hold the
// paragraph under the table: one line on stderr and a hint naming --help, nothing on stdout
// (probe --json prints the error as JSON there too), and a server command that cannot run
// neither calls anything nor creates a ledger.
func TestReadmeExitCodes(t *testing.T) {
	t.Parallel()
	rows := readmeExitCodes(t)
	if len(rows) != 4 || rows[0] == "" || rows[1] == "" || rows[2] == "" || rows[3] == "" {
		t.Fatalf("the README's exit codes are %v; this test knows 0, 1, 2 and 3", rows)
	}
	bin := effectfence(t)
	dir := t.TempDir()

	// A ledger with one done call, and a copy whose recorded result was edited after the fact.
	good := filepath.Join(dir, "good.db")
	effects0 := filepath.Join(dir, "effects0.log")
	if r := runBinary(t, nil, "", "probe", "--calls", "1", "--tool", "charge_card", "--args", `{"amount":4900}`,
		"--", bin, "wrap", "--ledger", good, "--", bin, "demo-server", "--effects", effects0); r.code != 0 {
		t.Fatalf("seeding a ledger: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	forged := filepath.Join(dir, "forged.db")
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(forged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", forged)
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	if err := db.QueryRow("SELECT body FROM records").Scan(&body); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte("ch_demo_0001")) {
		t.Fatalf("the seeded record does not hold its result ch_demo_0001: %s", body)
	}
	if _, err := db.Exec("UPDATE records SET body = ?", bytes.ReplaceAll(body, []byte("ch_demo_0001"), []byte("ch_demo_0002"))); err != nil {
		t.Fatal(err)
	}
	db.Close()
	foreign := filepath.Join(dir, "foreign.db")
	if err := os.WriteFile(foreign, []byte("name,amount\nalice,3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An MCP server that lists a tool and exits when it is called: no call is answered.
	dies := filepath.Join(dir, "dies.sh")
	if err := os.WriteFile(dies, []byte(`#!/bin/sh
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([^,}]*\).*/\1/p')
  case "$line" in
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}\n' "$id";;
    *'"tools/call"'*) exit 0;;
  esac
done
`), 0o700); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-such-server")

	type run struct {
		phrase string   // words of the README's row this case stands for
		args   []string // {EFFECTS} is a fresh effects file of the demo server
		env    []string
		check  func(t *testing.T, r result, effects, state string)
	}
	probeArgs := func(witness string, rest ...string) []string {
		return append([]string{"probe", "--calls", "4", "--tool", "charge_card", "--args", `{"amount":4900}`,
			"--witness", witness, "--witness-kind", "executions", "--"}, rest...)
	}
	count := fmt.Sprintf("%q demo-server --count {EFFECTS}", bin)
	executions := func(want int) func(t *testing.T, r result, effects, state string) {
		return func(t *testing.T, r result, effects, state string) {
			b, _ := os.ReadFile(effects)
			if n := bytes.Count(b, []byte("\n")); n != want {
				t.Errorf("the server executed %d times, want %d", n, want)
			}
		}
	}
	cases := map[int][]run{
		0: {
			{phrase: "success", args: []string{"version"}},
			{phrase: "success", args: []string{"ledger", "verify", "--ledger", good}},
			{phrase: "no double-fire proven", args: probeArgs(count, bin, "wrap", "--ledger", "memory", "--", bin, "demo-server", "--effects", "{EFFECTS}"),
				check: func(t *testing.T, r result, effects, state string) {
					if !strings.Contains(r.stdout, "EXACTLY ONCE") {
						t.Errorf("no EXACTLY ONCE verdict:\n%s", r.stdout)
					}
					executions(1)(t, r, effects, state)
				}},
		},
		1: {
			{phrase: "ledger verify/check found problems", args: []string{"ledger", "verify", "--ledger", forged}},
			{phrase: "ledger verify/check found problems", args: []string{"ledger", "check", "--ledger", foreign}},
			{phrase: "probe could not run", args: probeArgs(count, bin, "version")},
			{phrase: "no call was answered", args: probeArgs(count, dies)},
			{phrase: "its witness failed", args: probeArgs("exit 3", bin, "demo-server", "--effects", "{EFFECTS}"), check: executions(0)},
		},
		2: {
			{phrase: "unknown command", args: []string{"frobnicate"}},
			{phrase: "bad flag", args: []string{"wrap", "--no-such-flag", "--", bin, "demo-server"}},
			{phrase: "argument", args: []string{"probe", "--calls", "abc", "--tool", "charge_card", "--args", "{}", "--", bin, "demo-server"}},
			{phrase: "argument", args: []string{"demo", "extra"}},
			{phrase: "argument", env: []string{"EFFECTFENCE_LEASE_SECS=0.001"}, args: []string{"wrap", "--", bin, "demo-server"}},
			{phrase: "bad path", args: []string{"scan", missing}},
			{phrase: "a server command that cannot run", args: []string{"wrap", "--", missing}},
			{phrase: "a server command that cannot run", args: probeArgs(count, missing), check: executions(0)},
			{phrase: "a server command that cannot run", args: []string{"policy", "init", "--", missing}},
		},
		3: {
			{phrase: "PROVEN DOUBLE-FIRE", args: probeArgs(count, bin, "demo-server", "--effects", "{EFFECTS}"),
				check: func(t *testing.T, r result, effects, state string) {
					if !strings.Contains(r.stdout, "PROVEN DOUBLE-FIRE") {
						t.Errorf("no PROVEN DOUBLE-FIRE verdict:\n%s", r.stdout)
					}
					executions(4)(t, r, effects, state)
				}},
		},
	}
	for code, meaning := range rows {
		if len(cases[code]) == 0 {
			t.Errorf("README exit code %d (%s) has no case here", code, meaning)
		}
		for i, c := range cases[code] {
			if !strings.Contains(meaning, c.phrase) {
				t.Fatalf("README exit code %d no longer says %q: %s", code, c.phrase, meaning)
			}
			t.Run(fmt.Sprintf("%d/%d %s", code, i, c.phrase), func(t *testing.T) {
				sub := t.TempDir()
				effects := filepath.Join(sub, "effects.log")
				if err := os.WriteFile(effects, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				state := filepath.Join(sub, "state")
				if err := os.Mkdir(state, 0o700); err != nil {
					t.Fatal(err)
				}
				args := make([]string, len(c.args))
				for j, a := range c.args {
					args[j] = strings.ReplaceAll(a, "{EFFECTS}", effects)
				}
				r := runBinary(t, append([]string{"XDG_STATE_HOME=" + state, "EFFECTFENCE_LEDGER="}, c.env...), "", args...)
				if r.code != code {
					t.Fatalf("effectfence %s: exit %d, want %d (%s)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, code, meaning, r.stdout, r.stderr)
				}
				if code == exitUsage {
					lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
					if r.stdout != "" || len(lines) > 2 || !strings.HasPrefix(lines[0], "effectfence: ") || !strings.Contains(lines[len(lines)-1], "--help") {
						t.Errorf("a usage error is one line on stderr and a hint naming --help, nothing on stdout; got stdout %q, stderr %q", r.stdout, r.stderr)
					}
					if ents, _ := os.ReadDir(state); len(ents) != 0 {
						t.Errorf("a usage error created %s/%s", state, ents[0].Name())
					}
				}
				if c.check != nil {
					c.check(t, r, effects, state)
				}
			})
		}
	}

	// The exceptions: probe --json prints a usage error as JSON on stdout too,
	r := runBinary(t, nil, "", "probe", "--json", "--calls", "abc", "--tool", "charge_card", "--args", "{}", "--", bin, "demo-server")
	var e struct {
		Error struct {
			Code string `json:"code"`
			Exit int    `json:"exit"`
		} `json:"error"`
	}
	if r.code != exitUsage || json.Unmarshal([]byte(r.stdout), &e) != nil || e.Error.Code != "usage" || e.Error.Exit != exitUsage || !strings.Contains(r.stderr, "--help") {
		t.Errorf("probe --json with a bad flag: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// and policy check --json prints its verdict on a file it does not accept.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\ntools:\n  a: {fence: maybe}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runBinary(t, nil, "", "policy", "check", "--json", bad)
	var v struct {
		OK     bool              `json:"ok"`
		Errors []json.RawMessage `json:"errors"`
	}
	if r.code != exitUsage || json.Unmarshal([]byte(r.stdout), &v) != nil || v.OK || len(v.Errors) != 1 {
		t.Errorf("policy check --json of a bad file: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), "the exceptions are asked for: `probe --json` prints the error as JSON on stdout too, and `policy check --json` its verdict") {
		t.Error("the README no longer names probe --json and policy check --json as the exceptions; change this test with it")
	}
}
