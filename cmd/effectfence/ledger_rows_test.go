package main

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// ledgerRows is where a real ledger of one kind lives ("sqlite": a file in a test directory;
// "postgres": a schema of the test server) and hand access to its records table, as anyone
// with write access to the file or the database has: read gives an intent's stored body; exec
// runs q with $TABLE naming the records table and $1, $2, $3 its arguments; query runs q so
// and hands its rows to fn.
type ledgerRows struct {
	loc   string
	read  func(intent string) []byte
	exec  func(q string, args ...any)
	query func(q string, fn func(rows rowScanner) error)
}

// rowScanner is what database/sql's and pgx's rows share.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

func newLedgerRows(t *testing.T, kind, dir string) ledgerRows {
	t.Helper()
	var r ledgerRows
	switch kind {
	case "sqlite":
		r.loc = filepath.Join(dir, "ledger.db")
		db := func(fn func(db *sql.DB) error) {
			db, err := sql.Open("sqlite", r.loc)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := fn(db); err != nil {
				t.Fatal(err)
			}
		}
		r.read = func(intent string) (body []byte) {
			db(func(db *sql.DB) error {
				return db.QueryRow("SELECT body FROM records WHERE intent = ?", intent).Scan(&body)
			})
			return body
		}
		forSQLite := strings.NewReplacer("$TABLE", "records", "$1", "?", "$2", "?", "$3", "?")
		r.exec = func(q string, args ...any) {
			db(func(db *sql.DB) error {
				_, err := db.Exec(forSQLite.Replace(q), args...)
				return err
			})
		}
		r.query = func(q string, fn func(rows rowScanner) error) {
			db(func(db *sql.DB) error {
				rows, err := db.Query(forSQLite.Replace(q))
				if err != nil {
					return err
				}
				defer rows.Close()
				return fn(rows)
			})
		}
	case "postgres":
		r.loc = pgLedger(t)
		u, err := url.Parse(r.loc)
		if err != nil {
			t.Fatal(err)
		}
		table := pgx.Identifier{u.Query().Get("search_path"), "effectfence_records"}.Sanitize()
		pg := func(fn func(ctx context.Context, conn *pgx.Conn) error) {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, os.Getenv("EFFECTFENCE_TEST_POSTGRES"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if err := fn(ctx, conn); err != nil {
				t.Fatal(err)
			}
		}
		r.read = func(intent string) (body []byte) {
			pg(func(ctx context.Context, conn *pgx.Conn) error {
				return conn.QueryRow(ctx, "SELECT body FROM "+table+" WHERE intent = $1", intent).Scan(&body)
			})
			return body
		}
		r.exec = func(q string, args ...any) {
			pg(func(ctx context.Context, conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, strings.ReplaceAll(q, "$TABLE", table), args...)
				return err
			})
		}
		r.query = func(q string, fn func(rows rowScanner) error) {
			pg(func(ctx context.Context, conn *pgx.Conn) error {
				rows, err := conn.Query(ctx, strings.ReplaceAll(q, "$TABLE", table))
				if err != nil {
					return err
				}
				defer rows.Close()
				return fn(rows)
			})
		}
	default:
		t.Fatalf("no ledger of kind %q", kind)
	}
	return r
}
