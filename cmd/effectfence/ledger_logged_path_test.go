package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/postgres"
)

// TestLoggedLedgerPathReachesTheLedgerFromElsewhere: the ledger wrap and serve name in their
// first log line is the path an operator gives `effectfence ledger … --ledger` (docs/wrap.md:
// "--ledger <the path wrap logs at startup>"; the message of `--for` that finds no ledger says
// the same), from a shell of their own, while wrap and serve run in the directory their MCP
// client chose. A relative --ledger was logged as given ("ledger rel.db"), which from any
// other directory names no ledger; it is logged by its absolute path.
func TestLoggedLedgerPathReachesTheLedgerFromElsewhere(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		end  string // what follows the path on the line
	}{
		{[]string{"wrap", "--ledger", "rel.db", "--", "true"}, "; serving"},
		{[]string{"serve", "--ledger", "rel.db"}, " (lease"},
	} {
		dir := t.TempDir()
		cmd := exec.Command(binaryFor(t, c.args), c.args...)
		cmd.Dir = dir // where the MCP client started it
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "EFFECTFENCE_LEDGER=", "XDG_STATE_HOME="+t.TempDir())
		cmd.Stdin = strings.NewReader("") // the client hangs up at once
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v; stderr:\n%s", c.args, err, errb.String())
		}
		_, rest, ok := strings.Cut(errb.String(), " ledger ")
		logged, _, ok2 := strings.Cut(rest, c.end)
		if !ok || !ok2 {
			t.Fatalf("%v: no ledger named in the log:\n%s", c.args, errb.String())
		}
		if !filepath.IsAbs(logged) {
			t.Errorf("%v: the log names the ledger %q, which from another directory is no ledger; want its absolute path", c.args, logged)
		}
		// The operator, elsewhere, gives the logged path.
		code, stdout, stderr := runCLI(t, "", "ledger", "ls", "--ledger", logged)
		if code != exitOK {
			t.Errorf("%v: ledger ls --ledger %s (the path logged) from another directory: exit %d, stdout %q, stderr %q", c.args, logged, code, stdout, stderr)
		}
	}
}

// TestLoggedLedgerOtherThanAFile: memory and a PostgreSQL URL are logged as the store shows
// them, never made into a path: one whose user information Redact cannot read as pgx does
// is shown as no URL at all, which names no file either.
func TestLoggedLedgerOtherThanAFile(t *testing.T) {
	for _, raw := range []string{"memory", "postgres://u:pw@h/db", "postgres://u:s3cr%65t@h/db", "postgresql://h/db?password=x"} {
		shown := raw
		if raw != "memory" {
			shown = postgres.Redact(raw)
		}
		if got := shownLedger(store.Options{Ledger: raw}, &store.Ledger{Location: shown}); got != shown {
			t.Errorf("ledger %q (shown %q) is logged as %q", raw, shown, got)
		}
	}
}
