package main

import (
	"bytes"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestLookAtAnEmptySQLiteDatabaseCreatesNoLedger: docs/ledger.md, "An operator's look never
// creates a ledger". A path that names an empty SQLite database (a table made and dropped:
// no table left, no effectfence mark; another tool's new database, a mistyped path that a
// sqlite3 shell made) is not a ledger. Every ledger command refuses it (exit 1, nothing on
// stdout) and leaves it as it was, nothing beside it. Before, an empty file was refused but
// such a database was made a new ledger by the look itself: `ls` answered "0 intent(s)",
// exit 0, as if nothing were fenced, and the file was an effectfence ledger from then on.
func TestLookAtAnEmptySQLiteDatabaseCreatesNoLedger(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledgr.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE t(x); DROP TABLE t"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil || len(before) == 0 {
		t.Fatalf("the empty database: %d bytes, %v", len(before), err)
	}
	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}
	for _, args := range [][]string{
		{"ls"}, {"ls", "--json"}, {"show", "charge:order-7"}, {"stats"}, {"verify"}, {"export"}, {"sweep"},
		{"clear", "charge:order-7", "--reason", "checked"},
		{"resolve", "charge:order-7", "--did-not-happen", "--reason", "checked"},
	} {
		argv := append(append([]string{"ledger"}, args...), "--ledger", path)
		r := runBinary(t, env, "", argv...)
		if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "empty SQLite database") {
			t.Errorf("%q: exit %d; want 1 and nothing on stdout, naming the empty database\nstdout %s\nstderr %s", argv, r.code, r.stdout, r.stderr)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("the looks changed the file (%d bytes before, %d after, %v)", len(before), len(after), err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "ledgr.db" {
			t.Errorf("the looks left %s beside the file", e.Name())
		}
	}
}
