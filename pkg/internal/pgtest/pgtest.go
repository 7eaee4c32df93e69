// Package pgtest gives tests outside pkg/store/postgres a PostgreSQL ledger of their own: a
// fresh schema named in the URL's search_path, dropped when the test ends, so a test never
// writes to the server's public schema and parallel tests (and helpers) never share tables.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/internal/pgrows"
)

// EnvURL names the server the tests use; CI sets it.
const EnvURL = "EFFECTFENCE_TEST_POSTGRES"

// URL returns the test server's URL, or skips the test with SKIP-REQUIRED when it is unset.
func URL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		tb.Skipf("SKIP-REQUIRED: %s is not set (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)", EnvURL)
	}
	return u
}

// Ledger returns a ledger URL whose search_path is a schema no other test uses (the store
// creates it on first open) and registers a cleanup that drops the schema and checks it is gone.
//
// The URL opens few connections up front (FewConns). A test about the default pool removes
// the parameter (TestPostgresPoolSizeIsTheURLs).
func Ledger(tb testing.TB, prefix string) string {
	tb.Helper()
	raw := URL(tb)
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := fmt.Sprintf("effectfence_%s_%d_%s", prefix, os.Getpid(), hex.EncodeToString(b[:]))
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("%s: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	tb.Cleanup(func() { Drop(tb, raw, schema) })
	return FewConns(u.String())
}

// FewConns returns the store URL raw with pool_min_conns=1, unless it names a pool_min_conns
// of its own. A store opens 8 connections up front by default, and the suites run four
// packages at a time, each with tests that start several processes on a ledger; at 8 each they
// passed the server's default max_connections (100) and a test failed with "sorry, too many
// clients already". A pool still grows to its maximum under concurrent calls. Only a pool
// takes the parameter: a plain connection (pgx.Connect) is refused it as a server setting.
func FewConns(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw // the store's Open says what is wrong with it
	}
	q := u.Query()
	if !q.Has("pool_min_conns") {
		q.Set("pool_min_conns", "1")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Drop drops schema (and everything in it) on the server at raw and fails the test if it
// cannot, or if the schema is still there afterwards.
func Drop(tb testing.TB, raw, schema string) {
	tb.Helper()
	withConn(tb, raw, "dropping schema "+schema, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			return err
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil || n != 0 {
			return fmt.Errorf("schema %s still exists after the drop (%d, %v)", schema, n, err)
		}
		return nil
	})
}

// DropDatabase drops the database name on the server at raw, with whatever is connected to
// it, and fails the test if it cannot.
func DropDatabase(tb testing.TB, raw, name string) {
	tb.Helper()
	withConn(tb, raw, "dropping database "+name, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return err
	})
}

// withConn runs fn on a connection of its own to the server at raw, within 30 s, and fails
// the test (saying what it was doing) if it cannot connect or fn fails.
func withConn(tb testing.TB, raw, what string, fn func(context.Context, *pgx.Conn) error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		tb.Errorf("%s: %v", what, err)
		return
	}
	defer conn.Close(ctx)
	if err := fn(ctx, conn); err != nil {
		tb.Errorf("%s: %v", what, err)
	}
}

// Where reports, for a ledger URL made by Ledger, the intents recorded in its own schema and
// those of them that are (also) in the public schema's ledger tables, if any exist there.
// Other programs may leave ledger tables in public; only these intents say this test wrote there.
func Where(tb testing.TB, ledger string) (own, inPublic []string) {
	tb.Helper()
	u, err := url.Parse(ledger)
	if err != nil {
		tb.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	strs := func(q string, args ...any) []string {
		rows, err := conn.Query(ctx, q, args...)
		if err != nil {
			tb.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			tb.Fatal(err)
		}
		return out
	}
	own = strs("SELECT intent FROM " + pgx.Identifier{schema, "effectfence_records"}.Sanitize() + " ORDER BY 1")
	if len(strs("SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename = 'effectfence_records'")) == 1 {
		inPublic = strs("SELECT intent FROM public.effectfence_records WHERE intent = ANY($1) ORDER BY 1", own)
	}
	return own, inPublic
}

// Rows returns every row of every table in the ledger's schema, each value as its bytes (a
// bytea as it is, not as hex), one row a line (pgrows.Rows).
func Rows(t testing.TB, ledger string) []byte { return pgrows.Rows(t, URL(t), ledger) }
