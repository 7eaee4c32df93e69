package postgres

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/internal/pgtest"
)

// EnvTestURL names the server the tests use; CI sets it.
const EnvTestURL = "EFFECTFENCE_TEST_POSTGRES"

func testURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvTestURL)
	if u == "" {
		tb.Skipf("SKIP-REQUIRED: %s is not set (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)", EnvTestURL)
	}
	return u
}

// testSchema returns a fresh schema name, dropped when the test ends.
func testSchema(tb testing.TB) string {
	tb.Helper()
	url := testURL(tb)
	name := fmt.Sprintf("effectfence_test_%d_%s", os.Getpid(), randomHex(4))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			tb.Errorf("dropping schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("dropping schema %s: %v", name, err)
		}
	})
	return name
}

// openSchema opens a store on schema, closed when the test ends.
func openSchema(tb testing.TB, schema string) *Store {
	tb.Helper()
	return openSized(tb, schema, 0)
}

// openSized opens a store with at most maxConns connections (0: the default), for tests that
// open many stores on one server.
func openSized(tb testing.TB, schema string, maxConns int32) *Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One connection up front, not 8 (pgtest.FewConns); the pool still grows to maxConns.
	s, err := Open(ctx, Config{URL: pgtest.FewConns(testURL(tb)), Schema: schema, MaxConns: maxConns})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// newTestStore opens a store on a fresh schema.
func newTestStore(tb testing.TB) *Store {
	tb.Helper()
	return openSchema(tb, testSchema(tb))
}

// admin is a plain connection for the test's own queries (witness tables, pg_terminate_backend).
func admin(tb testing.TB, schema string) *pgx.Conn {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	if schema != "" {
		if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// newRole creates a role for one test, named prefix_<pid>_<random>, with attrs (LOGIN or
// NOLOGIN) and no privileges; it is dropped when the test ends (dropRole).
func newRole(tb testing.TB, prefix, attrs string) string {
	tb.Helper()
	role := fmt.Sprintf("%s_%d_%s", prefix, os.Getpid(), randomHex(4))
	if _, err := admin(tb, "").Exec(context.Background(), "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" "+attrs); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dropRole(tb, role) })
	return role
}

// dropRole drops everything role owns in the test database (its schemas with what is in
// them, the test's own tables there too), the privileges it was granted, and the role.
func dropRole(tb testing.TB, role string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testURL(tb))
	if err != nil {
		tb.Errorf("dropping role %s: %v", role, err)
		return
	}
	defer conn.Close(ctx)
	r := pgx.Identifier{role}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP OWNED BY "+r+" CASCADE; DROP ROLE "+r); err != nil {
		tb.Errorf("dropping role %s: %v", role, err)
	}
}
