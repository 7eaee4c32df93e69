package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLedgerReportToAFullDisk runs every ledger subcommand of the real binary with its stdout
// on /dev/full (every write fails: no space left on device): each exits 1 and says the output
// was not written, and those that change the ledger say they took effect. Before, only export
// and --json noticed: ls, show, verify, stats, sweep, check and clear exited 0 with their
// report lost, so `effectfence ledger verify > report.txt` on a full disk read as a success.
func TestLedgerReportToAFullDisk(t *testing.T) {
	t.Parallel()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedCLI(t, path)
	for _, args := range [][]string{
		{"ls"}, {"ls", "--json"}, {"show", "scale:web"}, {"verify"}, {"stats"}, {"export"}, {"check"}, {"sweep"},
		{"clear", "refund:9", "--reason", "no refund at the bank"},
	} {
		cmd := exec.Command(effectfence(t), append(append([]string{"ledger"}, args...), "--ledger", path)...)
		cmd.Env = append(os.Environ(), "NO_COLOR=1", "GORACE=atexit_sleep_ms=0")
		var errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = full, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		want := "writing the output failed"
		if args[0] == "clear" || args[0] == "sweep" {
			want = "took effect, but writing its report failed"
		}
		if code != exitError || !strings.Contains(errb.String(), want) || !strings.Contains(errb.String(), "no space left") {
			t.Errorf("ledger %q with stdout on /dev/full: exit %d (%v); want %d saying %q:\n%s", args, code, err, exitError, want, errb.String())
		}
	}
	// The clear took effect although its report was lost.
	if r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "show", "refund:9", "--ledger", path); !strings.Contains(r.stdout, "clear") || !strings.Contains(r.stdout, "no refund at the bank") {
		t.Errorf("after the clear:\n%s%s", r.stdout, r.stderr)
	}
}
