package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SPEC: every report has --json. version, policy check and demo had none.
func TestVersionAndPolicyCheckHaveJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(t, "", "version", "--json")
	var v struct{ Version, Commit string }
	if code != exitOK || json.Unmarshal([]byte(out), &v) != nil || v.Version == "" || v.Commit == "" {
		t.Fatalf("version --json: %d %q %q", code, out, errOut)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("version: 1\ntools:\n  charge: {fence: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("version: 1\ntools:\n  charge: {fence: maybe}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type verdict struct {
		File    string
		OK      bool
		Summary string
		Errors  []struct {
			Line, Column int
			Message      string
		}
	}
	var g, b verdict
	code, out, errOut = runCLI(t, "", "policy", "check", "--json", good)
	if code != exitOK || json.Unmarshal([]byte(out), &g) != nil || !g.OK || g.File != good || g.Summary == "" || len(g.Errors) != 0 {
		t.Fatalf("policy check --json of a good file: %d %q %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "", "policy", "check", "--json", bad)
	if code != exitUsage || json.Unmarshal([]byte(out), &b) != nil || b.OK || len(b.Errors) != 1 || b.Errors[0].Line != 3 || b.Errors[0].Message == "" {
		t.Fatalf("policy check --json of a bad file: %d %q %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "", "policy", "check", "--json", filepath.Join(dir, "missing.yaml"))
	if code != exitUsage || json.Unmarshal([]byte(out), &b) != nil || b.OK || len(b.Errors) != 1 {
		t.Fatalf("policy check --json of a missing file: %d %q", code, out)
	}
}

func TestDemoHasJSON(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(effectfence(t), "demo", "--json")
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	out, err := cmd.Output()
	var d struct {
		Acts []map[string]any `json:"acts"`
		OK   bool             `json:"ok"`
	}
	if err != nil || json.Unmarshal(out, &d) != nil {
		t.Fatalf("demo --json: %v, stdout %q (must be one JSON object)", err, out)
	}
	if !d.OK || len(d.Acts) != 2 || d.Acts[0]["executions"] != float64(12) || d.Acts[1]["executions"] != float64(1) ||
		d.Acts[1]["clean_answers"] != float64(12) || d.Acts[1]["distinct_charges"] != float64(1) {
		t.Fatalf("demo --json: %s", out)
	}
}

// TestDemoJSONOfARunThatCannotStart: `demo --json` whose run ends before either act (a TMPDIR
// that does not exist; an argument it does not take) still prints one JSON object on stdout,
// ok false with the error, and exits non-zero, as probe --json does. Before, stdout was
// empty and a script reading it had nothing to parse.
func TestDemoJSONOfARunThatCannotStart(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"demo", "--json"}, "TMPDIR=" + missing, "TMPDIR"},
		{[]string{"demo", "--json", "extra"}, "", "takes no arguments"},
	} {
		cmd := exec.Command(effectfence(t), c.args...)
		cmd.Env = append(os.Environ(), "NO_COLOR=1", c.env)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var d struct {
			Acts  []map[string]any `json:"acts"`
			OK    *bool            `json:"ok"`
			Error string           `json:"error"`
		}
		if err == nil {
			t.Errorf("%v with %s: exit 0, want a failure", c.args, c.env)
		}
		if jerr := json.Unmarshal(out, &d); jerr != nil || d.OK == nil || *d.OK || d.Acts == nil || len(d.Acts) != 0 || !strings.Contains(d.Error, c.want) {
			t.Errorf("%v with %s: stdout %q (%v), want one JSON object, ok false, no acts, an error naming %q", c.args, c.env, out, jerr, c.want)
		}
		if !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v with %s: stderr %q does not name %q", c.args, c.env, stderr.String(), c.want)
		}
	}
}

// `ledger stats --json` names every state, as the table does, with 0 where no intent is in it
// (it left those out, so a script reading "unknown" found nothing instead of 0).
func TestLedgerStatsJSONNamesEveryState(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedCLI(t, path) // done and failed intents, none in flight or unknown
	code, out, errOut := runCLI(t, "", "ledger", "stats", "--json", "--ledger", path)
	var st struct {
		States map[string]*int `json:"states"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("ledger stats --json: %d %q %q", code, out, errOut)
	}
	for state, want := range map[string]int{"in_flight": 0, "done": 3, "failed": 1, "unknown": 0} {
		if n := st.States[state]; n == nil || *n != want {
			t.Errorf("states[%q] = %v, want %d: %s", state, n, want, out)
		}
	}
}
