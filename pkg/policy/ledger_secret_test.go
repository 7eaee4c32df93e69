package policy

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestLedgerPasswordInAnyForm: a ledger URL from which the ledger's own driver (pgx, reading
// it as libpq does) takes a password is refused, however the password is written: in the
// user information, in the query (any letter case, a percent-encoded name), after an '@' that
// url.Parse reads as part of the query, or in a URL that url.Parse cannot read at all. pgx is
// the oracle: each case is first shown to carry a password to the database.
func TestLedgerPasswordInAnyForm(t *testing.T) {
	t.Setenv("PGPASSWORD", "")
	t.Setenv("PGPASSFILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("PGSERVICEFILE", filepath.Join(t.TempDir(), "none"))
	for _, u := range []string{
		"postgres://u:secret@h/d",
		"postgresql://u:secret@h/d",
		"postgres://u@h/d?password=secret",
		"postgres://u@h/d?sslmode=disable&password=secret",
		"postgres://u@h/d?pass%77ord=secret",
		"postgres://h?password=secret",
		"postgres://u:secret@h:notaport/d",
		"postgres://h?x=u:secret@other/d",
		"postgres://u:secret@h1,h2/d",
	} {
		c, err := pgconn.ParseConfig(u)
		if err == nil && c.Password == "" {
			t.Fatalf("%s: pgx takes no password from it; the case proves nothing", u)
		}
		if err != nil && !strings.Contains(u, "notaport") {
			t.Fatalf("%s: pgx cannot read it: %v", u, err)
		}
		_, err = Parse("p.yaml", []byte("version: 1\nledger: \""+u+"\"\n"))
		if err == nil || !strings.Contains(err.Error(), "p.yaml:2:9: the ledger URL holds a password") {
			t.Errorf("ledger %s: %v; want it refused for its password", u, err)
		}
	}
	// The client key's passphrase is a secret too, and so is a password given in another
	// letter case (pgx sends it to the server as a setting).
	for _, u := range []string{"postgres://u@h/d?sslpassword=secret", "postgres://u@h/d?PASSWORD=secret"} {
		_, err := Parse("p.yaml", []byte("version: 1\nledger: \""+u+"\"\n"))
		if err == nil || !strings.Contains(err.Error(), "p.yaml:2:9: the ledger URL holds") {
			t.Errorf("ledger %s: %v; want it refused for its secret", u, err)
		}
	}
	// What holds no secret is accepted: a user whose name has an encoded colon, a passfile.
	for _, u := range []string{"postgres://u%3Ax@h/d", "postgres://u@h/d?passfile=/etc/pgpass&sslmode=require", "postgres://h/d?application_name=a@b"} {
		if _, err := Parse("p.yaml", []byte("version: 1\nledger: \""+u+"\"\n")); err != nil {
			t.Errorf("ledger %s: %v", u, err)
		}
	}
}
