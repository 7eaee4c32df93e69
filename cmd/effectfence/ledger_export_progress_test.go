package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/ledger"
)

// TestLedgerExportProgressOnStderr: `ledger export` to a file with stderr on a terminal counts
// its lines there (SPEC §5: progress on stderr for anything that can take seconds), and the
// file holds the export alone, every line whole; with the export itself on the terminal, or
// stderr in a pipe, nothing but the export is written (docs/ledger.md).
func TestLedgerExportProgressOnStderr(t *testing.T) {
	t.Parallel()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script(1) to give the binary a terminal")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	seedCLI(t, path)
	file := filepath.Join(dir, "export.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "-qec", posixQuote(effectfence(t))+" ledger export --ledger "+posixQuote(path)+" > "+posixQuote(file), "/dev/null")
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "NO_COLOR=1")
	var term bytes.Buffer
	cmd.Stdout, cmd.Stderr = &term, &term
	if err := cmd.Run(); err != nil {
		t.Fatalf("export to a file: %v\n%s", err, term.String())
	}
	if !strings.Contains(term.String(), "effectfence ledger export: lines") {
		t.Errorf("export to a file shows no progress on the terminal:\n%q", term.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if end := lines[len(lines)-1]; !strings.HasPrefix(end, `{"end":`) {
		t.Fatalf("the exported file does not end with its end line: %q", end)
	}
	lines = lines[:len(lines)-1]
	for i, s := range lines {
		var line ledger.ExportLine
		if err := json.Unmarshal([]byte(s), &line); err != nil || (line.Record == nil) == (line.Event == nil) {
			t.Fatalf("line %d of the exported file is not one record or event (%v): %q", i+1, err, s)
		}
	}
	if len(lines) < 4 {
		t.Fatalf("the export holds %d lines, want the 4 records and their events", len(lines))
	}
	if out := onTerminal(t, []string{"NO_COLOR=1"}, "ledger", "export", "--ledger", path); strings.Contains(out, "lines (") {
		t.Errorf("export on the terminal draws a count over its lines:\n%q", out)
	}
	if r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "export", "--ledger", path); r.code != exitOK || r.stderr != "" {
		t.Errorf("export with stderr in a pipe: exit %d, stderr %q", r.code, r.stderr)
	}
}
