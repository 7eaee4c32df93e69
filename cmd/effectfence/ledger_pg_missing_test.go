package main

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// An operator's look never creates a ledger (docs/ledger.md: a missing ledger is exit 1), on
// PostgreSQL too: every ledger subcommand of the real binary, pointed at a search_path that
// names no ledger (a typo, a schema of something else), exits 1 saying so, prints nothing on
// stdout and creates neither the schema nor a table. Before, `ledger ls --state fenced`
// created an empty ledger there and answered "0 intent(s)", exit 0: nothing fenced.
func TestLedgerCommandsCreateNoPostgresLedger(t *testing.T) {
	t.Parallel()
	loc := pgLedger(t)
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("EFFECTFENCE_TEST_POSTGRES"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tables := func() (schemaThere bool, n int) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname LIKE 'effectfence%')", schema).Scan(&schemaThere, &n); err != nil {
			t.Fatal(err)
		}
		return schemaThere, n
	}
	env := []string{"NO_COLOR=1", store.EnvLedger + "="}
	look := func(t *testing.T) {
		t.Helper()
		for _, args := range [][]string{
			{"ls", "--state", "fenced"}, {"show", "charge:order-7"}, {"verify"}, {"export"}, {"stats"}, {"sweep"},
			{"clear", "charge:order-7", "--reason", "checked"},
			{"resolve", "charge:order-7", "--did-not-happen", "--reason", "checked"},
		} {
			r := runBinary(t, env, "", append(append([]string{"ledger"}, args...), "--ledger", loc)...)
			if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "no ledger in schema") {
				t.Errorf("ledger %s on a schema without a ledger: exit %d\nstdout %s\nstderr %s", args[0], r.code, r.stdout, r.stderr)
			}
		}
	}

	// No such schema.
	look(t)
	// check reads SQLite files only (DECISIONS-postgres): it says so, exit 1, without the
	// URL's password, and creates nothing either.
	pw := *u
	pw.User = url.UserPassword(u.User.Username(), "pw-s3cret")
	if r := runBinary(t, env, "", "ledger", "check", "--ledger", pw.String()); r.code != exitError || r.stdout != "" ||
		!strings.Contains(r.stderr, "check inspects SQLite files") || strings.Contains(r.stderr, "pw-s3cret") {
		t.Errorf("ledger check of a PostgreSQL ledger: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if there, n := tables(); there || n != 0 {
		t.Fatalf("the ledger commands created schema %s (%v) with %d effectfence tables", schema, there, n)
	}

	// A schema of something else: the ledger commands leave it as it is.
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+"; CREATE TABLE "+pgx.Identifier{schema, "photos"}.Sanitize()+" (id int)"); err != nil {
		t.Fatal(err)
	}
	look(t)
	if _, n := tables(); n != 0 {
		t.Fatalf("the ledger commands created %d effectfence tables in another program's schema", n)
	}

	// Once a process has used the ledger, the same commands read it.
	l, err := store.Open(ctx, store.Options{Ledger: loc})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := l.Prepare(ctx, fence.Request{Intent: "charge:order-7", Tool: "charge_card", Args: []byte(`{"amount":4900}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Abort(ctx, *adm.Ticket, "gateway timeout"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, env, "", "ledger", "ls", "--state", "fenced", "--ledger", loc)
	if r.code != exitOK || !strings.Contains(r.stdout, "1 intent(s)") || !strings.Contains(r.stdout, "charge:order-7") {
		t.Fatalf("ledger ls of the ledger once used: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}
