package postgres

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestOpenWithoutAURLIsRefused: Config's zero value, and a connection string that is no
// postgres:// URL, are refused with an error that says what to write, and open nothing.
// Before 2026-12-07 the zero Config (a service whose DATABASE_URL was unset) opened a ledger
// wherever libpq's defaults led (this host's socket, the database named after the user, its
// public schema) and a key=value string opened the one it named: a process so configured kept
// its own ledger beside the one its peers shared, and ran again what they had run. The
// documented form is a URL, which the ledger's spool name and redaction read.
func TestOpenWithoutAURLIsRefused(t *testing.T) {
	raw := testURL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	schema := testSchema(t)
	pass, _ := u.User.Password()
	kv := fmt.Sprintf("host=%s port=%s user=%s password='%s' dbname=%s sslmode=%s connect_timeout=10",
		u.Hostname(), u.Port(), u.User.Username(), pass, strings.TrimPrefix(u.Path, "/"), u.Query().Get("sslmode"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []Config{{Schema: schema}, {URL: kv, Schema: schema}, {URL: " " + raw, Schema: schema}} {
		st, err := Open(ctx, c)
		if err == nil {
			st.Close()
			t.Errorf("Open(URL %q) opened a ledger; want it refused", Redact(c.URL))
			continue
		}
		if !strings.Contains(err.Error(), "postgres://user@host:port/dbname") {
			t.Errorf("Open(URL %q): %v; want it to say how to write the URL", Redact(c.URL), err)
		}
		if pass != "" && strings.Contains(err.Error(), pass) {
			t.Errorf("the refusal shows the password: %v", err)
		}
	}
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("schema %s was made by a refused open", schema)
	}
}
