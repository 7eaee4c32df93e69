package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLedgerViewsProgressOnStderr: `ledger ls`, `verify` and `stats` writing to a file count
// the records they read on stderr when stderr is a terminal (SPEC §5: progress on stderr for
// anything that can take seconds; a huge ledger takes that), as export counts its lines, and
// clear the count before their report; the report holds no trace of it, and with stderr in a
// pipe nothing is written there. (With the report on the terminal too, no count is drawn:
// TestLedgerViewsEscapeHostileTextOnATerminal finds no carriage return there.)
func TestLedgerViewsProgressOnStderr(t *testing.T) {
	t.Parallel()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script(1) to give the binary a terminal")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	seedCLI(t, path)
	for _, sub := range []string{"ls", "verify", "stats"} {
		for _, json := range []string{"", " --json"} {
			file := filepath.Join(dir, sub+".out")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			cmd := exec.CommandContext(ctx, script, "-qec", posixQuote(effectfence(t))+" ledger "+sub+json+" --ledger "+posixQuote(path)+" > "+posixQuote(file), "/dev/null")
			cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "NO_COLOR=1")
			var term bytes.Buffer
			cmd.Stdout, cmd.Stderr = &term, &term
			err := cmd.Run()
			cancel()
			if err != nil {
				t.Fatalf("%s%s to a file: %v\n%s", sub, json, err, term.String())
			}
			if !strings.Contains(term.String(), "effectfence ledger "+sub+": records") {
				t.Errorf("%s%s shows no progress on the terminal's stderr:\n%q", sub, json, term.String())
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) == 0 || strings.Contains(string(b), "records (") || strings.Contains(string(b), "effectfence ledger "+sub) || strings.Contains(string(b), "\r") {
				t.Errorf("%s%s: the report carries the progress, or is empty:\n%q", sub, json, b)
			}
			if r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", sub, "--ledger", path); r.code != exitOK || r.stderr != "" || r.stdout == "" {
				t.Errorf("%s with stderr in a pipe: exit %d, stderr %q", sub, r.code, r.stderr)
			}
		}
	}
}
