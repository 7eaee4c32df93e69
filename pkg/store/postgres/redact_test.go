package postgres

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRedactHidesEveryPassword: the ledger URL shown in logs, errors and a fenced call's
// answer (which reaches the agent) carries no secret pgx would send, however it is written:
// in the user information, after an '@' that url.Parse reads as query, in the query in any
// letter case or percent-encoded, or as sslpassword. pgx is the oracle for the password cases.
func TestRedactHidesEveryPassword(t *testing.T) {
	t.Setenv("PGPASSWORD", "")
	t.Setenv("PGPASSFILE", filepath.Join(t.TempDir(), "none"))
	for _, u := range []string{
		"postgres://u:secret@h/d",
		"postgres://u@h/d?password=secret",
		"postgres://u@h/d?pass%77ord=secret",
		"postgres://h?x=u:secret@other/d",
		"postgres://u:secret@h1,h2/d?sslmode=disable",
	} {
		if c, err := pgconn.ParseConfig(u); err != nil || c.Password != "secret" {
			t.Fatalf("%s: pgx takes no password from it (%v); the case proves nothing", u, err)
		}
		if got := Redact(u); strings.Contains(got, "secret") {
			t.Errorf("Redact(%s) = %s", u, got)
		}
	}
	for _, u := range []string{"postgres://u@h/d?sslpassword=secret", "postgres://u@h/d?PASSWORD=secret&sslmode=disable", "postgres://u@h/d?a=1;password=secret"} {
		if got := Redact(u); strings.Contains(got, "secret") {
			t.Errorf("Redact(%s) = %s", u, got)
		}
	}
	// What holds no secret is shown as it was.
	for _, u := range []string{"postgres://u@h:5432/d?sslmode=require", "postgres://h/d?application_name=a@b"} {
		if got := Redact(u); got != u {
			t.Errorf("Redact(%s) = %s", u, got)
		}
	}
}

// TestSpoolNameIsStable: the spool of a PostgreSQL ledger was named by the hash of the redacted
// URL redacted again (store.Open redacted it before naming the spool); it is now named from
// the URL itself. The two agree when SpoolName is idempotent, which this holds, so outcomes an
// earlier effectfence spooled are found.
func TestSpoolNameIsStable(t *testing.T) {
	for _, u := range []string{"postgres://u:secret@h/d", "postgres://u@h:5432/d?sslmode=require&password=s&application_name=a b",
		"postgresql://u@[::1]:5432/d?search_path=x,y", "postgres://u%40corp:p%2Fq@h/d?options=-c%20x%3Dy", "postgres://h/d?b=2&a=1"} {
		if once, twice := SpoolName(u), SpoolName(SpoolName(u)); once != twice {
			t.Errorf("%s: %s, then %s", u, once, twice)
		}
	}
}
