package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLedgerCheckNamesATornHeader: a file shorter than the 100-byte SQLite header that begins
// with SQLite's magic (a ledger cut to its first bytes, or any SQLite file cut so) cannot say
// what it was: its application_id (bytes 68-71) is gone. `ledger check` calls it a torn SQLite
// file, says why, and exits 1; it never calls it an effectfence ledger (a guess it once made).
func TestLedgerCheckNamesATornHeader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	seedCLI(t, good)
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"magic and page size": []byte("SQLite format 3\x00\x10\x00"),
		"a ledger cut at 50":  b[:50],
		"a ledger cut at 99":  b[:99],
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".db")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, "", "ledger", "check", "--ledger", path)
		if code != exitError || !strings.Contains(out, fmt.Sprintf("kind: torn SQLite file, %d bytes", len(content))) ||
			!strings.Contains(out, "truncated (torn)") || !strings.Contains(out, "shorter than the 100-byte SQLite header") ||
			strings.Contains(out, "kind: effectfence ledger") || !strings.Contains(out, "what to do:") {
			t.Errorf("%s: check = %d\nstdout %s\nstderr %s", name, code, out, errOut)
		}
		code, out, errOut = runCLI(t, "", "ledger", "check", "--ledger", path, "--json")
		var rep struct {
			OK       bool
			Kind     string
			Problems []string
		}
		if code != exitError || json.Unmarshal([]byte(out), &rep) != nil || rep.OK || rep.Kind != "torn SQLite file" || len(rep.Problems) != 1 {
			t.Errorf("%s: check --json = %d\nstdout %s\nstderr %s", name, code, out, errOut)
		}
	}
}
