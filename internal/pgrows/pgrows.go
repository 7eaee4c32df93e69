// Package pgrows reads back everything a PostgreSQL ledger's schema holds, for tests that look
// for a value the ledger must not keep (docs/privacy.md).
package pgrows

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Rows returns every row of every table in the schema of ledger (a URL whose search_path
// names it) on server, each value as its bytes
// (a bytea as it is, not as hex), one row a line.
func Rows(t testing.TB, server, ledger string) []byte {
	t.Helper()
	u, err := url.Parse(ledger)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	trows, err := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(trows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		t.Fatalf("tables of schema %s: %v, %v", schema, tables, err)
	}
	var out bytes.Buffer
	for _, table := range tables {
		rows, err := conn.Query(ctx, "SELECT * FROM "+pgx.Identifier{schema, table}.Sanitize())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			out.WriteString(table)
			for _, v := range vals {
				if b, ok := v.([]byte); ok {
					out.WriteString("\t" + string(b))
				} else {
					fmt.Fprintf(&out, "\t%v", v)
				}
			}
			out.WriteString("\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return []byte(strings.ToValidUTF8(out.String(), "?"))
}
