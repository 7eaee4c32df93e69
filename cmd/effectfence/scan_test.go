package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runScan(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"effectfence", "scan"}, args...), streams{strings.NewReader(""), &out, &errb})
	return code, out.String(), errb.String()
}

const traps = "../../pkg/scan/testdata/traps/ts"

func TestScanExitCodes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "server.ts")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"missing path", []string{filepath.Join(t.TempDir(), "nope")}, exitUsage, "must be an existing directory"},
		{"file, not a directory", []string{file}, exitUsage, "not a directory"},
		{"no path", nil, exitUsage, "exactly one PATH"},
		{"two formats", []string{"--json", "--sarif", traps}, exitUsage, "one of --json and --sarif"},
		{"empty directory", []string{t.TempDir()}, exitOK, ""},
		{"candidates found", []string{traps}, exitOK, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runScan(t, c.args...)
			if code != c.code || !strings.Contains(errs, c.err) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q), stdout %q", code, c.code, errs, c.err, out)
			}
			if c.code == exitOK && !strings.Contains(out, "What a source scan cannot see") {
				t.Errorf("report lacks the cannot-see list:\n%s", out)
			}
		})
	}
}

func TestScanFormats(t *testing.T) {
	code, out, _ := runScan(t, "--json", traps)
	var rep struct {
		Candidates []struct {
			Name  string `json:"name"`
			Money bool   `json:"money"`
		} `json:"candidates"`
		CannotSee []string `json:"cannot_see"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Candidates) != 3 || len(rep.CannotSee) == 0 {
		t.Fatalf("--json: exit %d, %d candidates, output %.200q", code, len(rep.Candidates), out)
	}
	code, out, _ = runScan(t, "--sarif", traps)
	var log struct {
		Version string `json:"version"`
		Runs    []struct {
			Results []json.RawMessage `json:"results"`
		} `json:"runs"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &log) != nil || log.Version != "2.1.0" || len(log.Runs) != 1 || len(log.Runs[0].Results) != 3 {
		t.Fatalf("--sarif: exit %d, output %.200q", code, out)
	}
	_, out, _ = runScan(t, traps)
	if strings.Contains(out, "\x1b[") {
		t.Errorf("colour codes written to a non-terminal")
	}
}

func TestColorFor(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	t.Setenv("NO_COLOR", "1")
	if colorFor(w) {
		t.Error("colour chosen with NO_COLOR set")
	}
	os.Unsetenv("NO_COLOR")
	if colorFor(w) || colorFor(&bytes.Buffer{}) {
		t.Error("colour chosen for a pipe or a buffer")
	}
}
