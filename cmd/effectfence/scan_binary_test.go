package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScanBinaryExitCodes holds docs/scan.md's exit codes on the real binary: 0 when the scan
// completed (whatever it found; a zero is never silent), 2 for a missing PATH or wrong
// arguments, 1 when --run could not start the server or read its tools (an error, never an
// empty list).
func TestScanBinaryExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	notMCP := filepath.Join(dir, "not-mcp.sh")
	if err := os.WriteFile(notMCP, []byte("#!/bin/sh\necho 'hello, I am not an MCP server'\n"), 0o700); err != nil {
		t.Fatal(err)
	}

	silent := filepath.Join(dir, "silent.sh")
	if err := os.WriteFile(silent, []byte("#!/bin/sh\nexec sleep 300\n"), 0o700); err != nil {
		t.Fatal(err)
	}

	r := runBinary(t, nil, "", "scan", empty)
	if r.code != exitOK || !strings.Contains(r.stdout, "no MCP tool declaration found") {
		t.Errorf("empty directory: exit %d, stdout %q, stderr %q; want 0 and a note that nothing was found", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, nil, "", "scan", "--json", empty)
	var rep struct {
		Notes []struct{ Kind, Text string } `json:"notes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != exitOK || err != nil || len(rep.Notes) != 1 ||
		rep.Notes[0].Kind != "no_declarations" || !strings.Contains(rep.Notes[0].Text, "no MCP tool declaration found") {
		t.Errorf("empty directory --json: exit %d, notes %q (%v)", r.code, rep.Notes, err)
	}

	for _, c := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"missing path", []string{"scan", filepath.Join(dir, "nope")}, exitUsage, "must be an existing directory"},
		{"a file", []string{"scan", notMCP}, exitUsage, "not a directory"},
		{"bad flag", []string{"scan", "--run-timeout", "soon", empty}, exitUsage, "soon"},
		{"--run without a command", []string{"scan", empty, "--run"}, exitUsage, "needs the server command"},
		{"--run: no such server", []string{"scan", "--run", empty, "--", filepath.Join(dir, "no-such-server")}, exitError, "cannot start"},
		{"--run: not an MCP server", []string{"scan", "--json", "--run", "--run-timeout", "20s", empty, "--", notMCP}, exitError, "scan --run"},
		// A server that never answers is given up after --run-timeout (runBinary's own bound
		// is two minutes; the server would sleep five).
		{"--run: a server that never answers", []string{"scan", "--run", "--run-timeout", "2s", empty, "--", silent}, exitError, "scan --run"},
	} {
		r := runBinary(t, nil, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.err) || r.stdout != "" {
			t.Errorf("%s: exit %d (want %d), stdout %q (want none), stderr %q (want %q)", c.name, r.code, c.code, r.stdout, r.stderr, c.err)
		}
	}
}
