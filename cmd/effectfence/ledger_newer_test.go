package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// setSchemaVersion writes v as the ledger's schema version, as a build of that version would.
func setSchemaVersion(t *testing.T, path string, v int) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("UPDATE meta SET value = ? WHERE key = 'schema_version'", v); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerOfANewerBuild runs the real binary on a healthy ledger that a newer effectfence
// wrote (docs/ledger.md: refused with a clear error that names `effectfence ledger check`;
// nothing is changed). Every subcommand exits 1 and leaves the file as it was; `ledger check`
// says to use a newer build and never to move the ledger aside: it is not damaged, and a new
// ledger in its place would not replay its receipts, so their effects could run again. Once
// a build that reads it opens it, every record is there.
func TestLedgerOfANewerBuild(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedCLI(t, path)
	setSchemaVersion(t, path, sqlite.SchemaVersion+1)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"NO_COLOR=1", store.EnvLedger + "="}
	for _, args := range [][]string{
		{"ls"}, {"show", "scale:web"}, {"verify"}, {"export"}, {"stats"}, {"sweep"},
		{"clear", "refund:9", "--reason", "checked"},
		{"resolve", "refund:9", "--did-not-happen", "--reason", "checked"},
	} {
		r := runBinary(t, env, "", append(append([]string{"ledger"}, args...), "--ledger", path)...)
		if r.code != exitError || !strings.Contains(r.stderr, "newer than this build") ||
			!strings.Contains(r.stderr, "effectfence ledger check --ledger "+path) || strings.Contains(r.stderr, "move the file aside") {
			t.Errorf("ledger %s on a newer ledger: exit %d\nstdout %s\nstderr %s", args[0], r.code, r.stdout, r.stderr)
		}
	}
	r := runBinary(t, env, "", "ledger", "check", "--ledger", path)
	if r.code != exitError || !strings.Contains(r.stdout, "newer than this build") || !strings.Contains(r.stdout, "do not move it aside") ||
		strings.Contains(r.stdout, "mv ") || strings.Contains(r.stdout, ".recover") {
		t.Errorf("ledger check on a newer ledger: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, env, "", "ledger", "check", "--json", "--ledger", path)
	var rep sqlite.CheckReport
	if r.code != exitError || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.OK || rep.SchemaVersion != sqlite.SchemaVersion+1 ||
		len(rep.Problems) != 1 || len(rep.Advice) != 1 || !strings.Contains(rep.Advice[0], "do not move it aside") {
		t.Errorf("ledger check --json on a newer ledger: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("the ledger commands changed a newer build's ledger")
	}
	// A read-only open leaves an empty write-ahead log (and its index) beside a WAL ledger;
	// nothing may be in it.
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() != 0 {
		t.Fatalf("the ledger commands wrote %d bytes to the newer ledger's write-ahead log", fi.Size())
	}
	// Nothing was lost: read by a build that knows the version (here: set back), every record
	// is there.
	setSchemaVersion(t, path, sqlite.SchemaVersion)
	r = runBinary(t, env, "", "ledger", "ls", "--ledger", path)
	if r.code != exitOK || !strings.Contains(r.stdout, "4 intent(s)") {
		t.Fatalf("ledger ls after the version is known again: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// TestLedgerOfANewerBuildOnPostgres: the same on a PostgreSQL ledger whose schema a newer
// effectfence wrote: every subcommand exits 1 saying so, and nothing is changed (the version,
// the records and the audit events are as they were).
func TestLedgerOfANewerBuildOnPostgres(t *testing.T) {
	loc := pgLedger(t)
	seedCLI(t, loc)
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	schema := pgx.Identifier{u.Query().Get("search_path")}.Sanitize()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("EFFECTFENCE_TEST_POSTGRES"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	snapshot := func() string {
		var s string
		if err := conn.QueryRow(ctx, "SELECT (SELECT version FROM "+schema+".effectfence_version)::text || ' ' || "+
			"(SELECT count(*) FROM "+schema+".effectfence_records)::text || ' ' || "+
			"(SELECT coalesce(string_agg(md5(body::text), ',' ORDER BY intent), '') FROM "+schema+".effectfence_records) || ' ' || "+
			"(SELECT count(*) FROM "+schema+".effectfence_events)::text").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := conn.Exec(ctx, "UPDATE "+schema+".effectfence_version SET version = version + 1"); err != nil {
		t.Fatal(err)
	}
	before := snapshot()
	env := []string{"NO_COLOR=1", store.EnvLedger + "="}
	for _, args := range [][]string{
		{"ls"}, {"ls", "--json"}, {"show", "scale:web"}, {"verify"}, {"export"}, {"stats"}, {"sweep"},
		{"clear", "refund:9", "--reason", "checked"},
		{"resolve", "refund:9", "--did-not-happen", "--reason", "checked"},
	} {
		r := runBinary(t, env, "", append(append([]string{"ledger"}, args...), "--ledger", loc)...)
		if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "newer than this build") {
			t.Errorf("ledger %s on a newer PostgreSQL ledger: exit %d\nstdout %s\nstderr %s", args, r.code, r.stdout, r.stderr)
		}
	}
	if after := snapshot(); after != before {
		t.Fatalf("the ledger commands changed a newer build's PostgreSQL ledger:\nbefore %s\nafter  %s", before, after)
	}
}
