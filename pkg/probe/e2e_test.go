package probe_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// bin is the real effectfence binary, built once; it is the probe, the raw demo server and
// the fence.
var bin string

func TestMain(m *testing.M) { os.Exit(cmdtest.Main(m, &bin)) }

// effects returns a fresh, empty effects file for the demo server and a witness that counts it.
func effects(t *testing.T) (path, witness string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "effects.log")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, fmt.Sprintf("%q demo-server --count %q", bin, path)
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func probeJSON(t *testing.T, r cmdtest.Result) probe.Report {
	t.Helper()
	var rep probe.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("--json output does not parse: %v\nstdout:\n%s\nstderr:\n%s", err, r.Stdout, r.Stderr)
	}
	return rep
}

func TestProbeCountingToolIsProvenDoubleFire(t *testing.T) {
	t.Parallel()
	file, witness := effects(t)
	server := []string{"--", bin, "demo-server", "--effects", file}

	text := cmdtest.Run(t, nil, bin, append([]string{"probe", "--tool", "charge_card", "--args", `{"amount":4900}`, "--calls", "12", "--witness", witness, "--witness-kind", "executions"}, server...)...)
	if text.Code != 3 {
		t.Fatalf("exit %d, want 3 (double-fire proven)\n%s%s", text.Code, text.Stdout, text.Stderr)
	}
	for _, want := range []string{"PROVEN DOUBLE-FIRE", "0 → 12", "counted 12 executions", "ch_demo_0012", "(counts executions)"} {
		if !strings.Contains(text.Stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, text.Stdout)
		}
	}
	if !regexp.MustCompile(`distinct successful answers +│ 12 `).MatchString(text.Stdout) {
		t.Errorf("report lacks the distinct answers row:\n%s", text.Stdout)
	}
	if strings.Contains(text.Stdout, "\x1b[") {
		t.Error("colour escapes written to a pipe")
	}
	if n := countLines(t, file); n != 12 {
		t.Fatalf("server recorded %d executions, want 12", n)
	}

	js := cmdtest.Run(t, nil, bin, append([]string{"probe", "--json", "--tool", "charge_card", "--args", `{"amount":4900}`, "--calls", "12", "--witness", witness, "--witness-kind", "executions"}, server...)...)
	rep := probeJSON(t, js)
	if js.Code != 3 || rep.Verdict != probe.DoubleFire || rep.Calls != 12 || rep.Succeeded != 12 || rep.Distinct != 12 ||
		rep.Witness == nil || rep.Witness.Before != 12 || rep.Witness.After != 24 || rep.Witness.Effects != 12 {
		t.Fatalf("exit %d, JSON report %+v witness %+v", js.Code, rep, rep.Witness)
	}
}

func TestProbeDeterministicToolIsInconclusiveUntilWitnessed(t *testing.T) {
	t.Parallel()
	file, witness := effects(t)
	server := []string{"--", bin, "demo-server", "--effects", file}
	args := []string{"probe", "--json", "--tool", "record_event", "--args", `{"name":"signup"}`, "--calls", "8"}

	r := cmdtest.Run(t, nil, bin, append(args, server...)...)
	rep := probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.Inconclusive || rep.Distinct != 1 || rep.Succeeded != 8 {
		t.Fatalf("exit %d, report %+v", r.Code, rep)
	}
	if !strings.Contains(rep.NotProven, "once or 8 times") {
		t.Errorf("an inconclusive verdict must say what it did not prove: %q", rep.NotProven)
	}

	// The same answers, but now the effects are counted: 8 executions, proven.
	r = cmdtest.Run(t, nil, bin, append(append(args, "--witness", witness, "--witness-kind", "executions"), server...)...)
	rep = probeJSON(t, r)
	if r.Code != 3 || rep.Verdict != probe.DoubleFire || rep.Distinct != 1 || rep.Witness.Effects != 8 {
		t.Fatalf("exit %d, report %+v witness %+v", r.Code, rep, rep.Witness)
	}
	if n := countLines(t, file); n != 16 {
		t.Fatalf("server recorded %d executions, want 16", n)
	}
}

func TestProbeSelfGuardingToolShowsNoRaceSurface(t *testing.T) {
	t.Parallel()
	file, witness := effects(t)
	r := cmdtest.Run(t, nil, bin, "probe", "--json", "--tool", "book_seat", "--args", `{"seat":"12A"}`, "--calls", "10", "--witness", witness, "--witness-kind", "executions",
		"--", bin, "demo-server", "--effects", file)
	rep := probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.OnceMeasured || rep.Succeeded != 1 || rep.ToolErrors != 9 || rep.Witness.Effects != 1 {
		t.Fatalf("exit %d, report %+v", r.Code, rep)
	}
	// Without the witness the answers alone: one success, the rest refused by the server.
	r = cmdtest.Run(t, nil, bin, "probe", "--json", "--tool", "book_seat", "--args", `{"seat":"14C"}`, "--calls", "10",
		"--", bin, "demo-server", "--effects", file)
	rep = probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.NoRaceSurface || rep.Succeeded != 1 || rep.ToolErrors != 9 || rep.DistinctErrors != 1 {
		t.Fatalf("exit %d, report %+v", r.Code, rep)
	}
}

func TestProbeThroughWrapRunsOnce(t *testing.T) {
	t.Parallel()
	file, witness := effects(t)
	r := cmdtest.Run(t, []string{"EFFECTFENCE_LEDGER=memory"}, bin, "probe", "--json", "--tool", "charge_card", "--args", `{"amount":4900}`, "--calls", "12", "--witness", witness, "--witness-kind", "executions",
		"--", bin, "wrap", "--", bin, "demo-server", "--effects", file)
	rep := probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.OnceMeasured || rep.Succeeded != 12 || rep.Distinct != 1 || rep.Witness.Effects != 1 {
		t.Fatalf("exit %d, report %+v witness %+v\nstderr:\n%s", r.Code, rep, rep.Witness, r.Stderr)
	}
	if n := countLines(t, file); n != 1 {
		t.Fatalf("server recorded %d executions, want 1", n)
	}
}

// TestProbeRealEverythingServer probes the reference server from npm: its
// toggle-simulated-logging tool answers "Started…" and "Stopped…" in turn, so identical calls
// prove repeated execution; its echo tool is deterministic, so the answers prove nothing.
func TestProbeRealEverythingServer(t *testing.T) {
	t.Parallel()
	everything, err := filepath.Abs("../../.peers/node_modules/.bin/mcp-server-everything")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(everything); err != nil {
		t.Skip("@modelcontextprotocol/server-everything is not installed in .peers (run scripts/install-peers; scripts/test does)")
	}
	r := cmdtest.Run(t, nil, bin, "probe", "--json", "--tool", "toggle-simulated-logging", "--calls", "6", "--", everything)
	rep := probeJSON(t, r)
	if r.Code != 3 || rep.Verdict != probe.DoubleFire || rep.Distinct != 2 || rep.Succeeded != 6 {
		t.Fatalf("toggle: exit %d, report %+v\nstderr:\n%s", r.Code, rep, r.Stderr)
	}
	r = cmdtest.Run(t, nil, bin, "probe", "--json", "--tool", "echo", "--args", `{"message":"once?"}`, "--calls", "12", "--", everything)
	rep = probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.Inconclusive || rep.Distinct != 1 || rep.Succeeded != 12 {
		t.Fatalf("echo: exit %d, report %+v\nstderr:\n%s", r.Code, rep, r.Stderr)
	}
	r = cmdtest.Run(t, nil, bin, "probe", "--tool", "charge_card", "--", everything)
	if r.Code != 2 || !strings.Contains(r.Stderr, `no tool "charge_card"`) || !strings.Contains(r.Stderr, "echo, ") {
		t.Fatalf("unknown tool: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// TestProbeBadInput: each mistake is one clear line on stderr, a non-zero exit, nothing on
// stdout, and no call made (the effects file stays empty, or the server never starts).
func TestProbeBadInput(t *testing.T) {
	t.Parallel()
	notMCP := filepath.Join(t.TempDir(), "not-mcp.sh")
	if err := os.WriteFile(notMCP, []byte("#!/bin/sh\necho 'hello, I am not an MCP server'\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string // before "--"; the demo server follows unless server is set
		srv  []string
		code int
		want string
	}{
		{"missing --tool", []string{"--args", `{"amount":1}`}, nil, 2, "--tool is required"},
		{"unknown tool", []string{"--tool", "refund_card"}, nil, 2, `no tool "refund_card"; it has: book_seat, charge_card, record_event`},
		{"args an array", []string{"--tool", "charge_card", "--args", `[4900]`}, nil, 2, "must be a JSON object"},
		{"args not JSON", []string{"--tool", "charge_card", "--args", `{amount: 4900}`}, nil, 2, "not valid JSON"},
		{"calls zero", []string{"--tool", "charge_card", "--calls", "0"}, nil, 2, "--calls must be at least 1"},
		{"calls negative", []string{"--tool", "charge_card", "--calls", "-3"}, nil, 2, "--calls must be at least 1"},
		{"calls too many", []string{"--tool", "charge_card", "--calls", "10001"}, nil, 2, "--calls must be at most 10000"},
		{"args a string", []string{"--tool", "charge_card", "--args", `"4900"`}, nil, 2, "must be a JSON object"},
		{"args with text after", []string{"--tool", "charge_card", "--args", `{"amount":4900} {}`}, nil, 2, "text after the JSON value"},
		{"no server command", []string{"--tool", "charge_card"}, []string{}, 2, "no server command"},
		{"server does not exist", []string{"--tool", "charge_card"}, []string{"--", "/nonexistent/mcp-server"}, 2, "cannot run the server command"},
		{"server not on PATH", []string{"--tool", "charge_card"}, []string{"--", "effectfence-no-such-server"}, 2, "executable file not found"},
		{"server is not MCP", []string{"--tool", "charge_card"}, []string{"--", notMCP}, 1, "did not start as an MCP server"},
		{"witness prints no number", []string{"--tool", "charge_card", "--witness", "echo none"}, nil, 1, "printed no whole number"},
		{"witness fails", []string{"--tool", "charge_card", "--witness", "echo 3; echo broken >&2; exit 2"}, nil, 1, "broken"},
		{"bad witness kind", []string{"--tool", "charge_card", "--witness", "echo 1", "--witness-kind", "rows"}, nil, 2, "--witness-kind must be executions or state"},
		{"bad pattern", []string{"--tool", "charge_card", "--pattern", "burst"}, nil, 2, "--pattern must be storm or retry"},
		{"witness kind without a witness", []string{"--tool", "charge_card", "--witness-kind", "executions"}, nil, 2, "give --witness too"},
		// A zero was taken as "unset": the retry pattern then waited 5 s, not the 0 asked for.
		{"retry after zero", []string{"--tool", "charge_card", "--pattern", "retry", "--retry-after", "0s"}, nil, 2, "--retry-after must be positive"},
		{"retry after negative", []string{"--tool", "charge_card", "--pattern", "retry", "--retry-after", "-1s"}, nil, 2, "--retry-after must be positive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file, _ := effects(t)
			srv := c.srv
			if srv == nil {
				srv = []string{"--", bin, "demo-server", "--effects", file}
			}
			r := cmdtest.Run(t, nil, bin, append(append([]string{"probe"}, c.args...), srv...)...)
			if r.Code != c.code {
				t.Errorf("exit %d, want %d", r.Code, c.code)
			}
			lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
			if c.code == 2 && len(lines) == 2 && strings.Contains(lines[1], "effectfence probe --help") {
				lines = lines[:1] // a usage error adds one line: the hint to read the help
			}
			if len(lines) != 1 || !strings.Contains(lines[0], c.want) {
				t.Errorf("stderr should be one line containing %q, got:\n%s", c.want, r.Stderr)
			}
			if r.Stdout != "" {
				t.Errorf("stdout should be empty, got:\n%s", r.Stdout)
			}
			if n := countLines(t, file); n != 0 {
				t.Errorf("%d executions happened; nothing should have been called", n)
			}
			// With --json, stdout is one JSON error object with the same exit code.
			r = cmdtest.Run(t, nil, bin, append(append([]string{"probe", "--json"}, c.args...), srv...)...)
			var e struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
					Exit    int    `json:"exit"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(r.Stdout), &e); err != nil || r.Code != c.code || e.Error.Exit != c.code ||
				!strings.Contains(e.Error.Message, c.want) || (c.code == 2) != (e.Error.Code == "usage") {
				t.Errorf("--json: exit %d, stdout %q (%v)", r.Code, r.Stdout, err)
			}
		})
	}
}
