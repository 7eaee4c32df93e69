package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/jackc/pgx/v5"
)

// TestOpenInAnExistingSchemaNeedsNoDatabaseCreate holds docs/postgres.md's "The role needs
// CREATE on the database (for the schema) or an existing schema it may create tables in": a
// role without CREATE on the database, owning a schema an administrator made for it, opens a
// ledger there (named in Config.Schema and in the URL's search_path) and uses it. A role with
// neither is refused with PostgreSQL's reason.
func TestOpenInAnExistingSchemaNeedsNoDatabaseCreate(t *testing.T) {
	ctx := context.Background()
	conn := admin(t, "")
	role := newRole(t, "effectfence_test_nocreate", "NOLOGIN")
	r := pgx.Identifier{role}.Sanitize()
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	// Databases grant nothing to PUBLIC but CONNECT and TEMP unless an operator changed it:
	// make sure the role really lacks CREATE on this one.
	var may bool
	if err := conn.QueryRow(ctx, "SELECT has_database_privilege($1, $2, 'CREATE')", role, db).Scan(&may); err != nil {
		t.Fatal(err)
	}
	if may {
		t.Fatalf("role %s may create schemas in database %s (granted to PUBLIC?); the test needs a role that may not", role, db)
	}
	for _, how := range []string{"config", "search_path"} {
		t.Run(how, func(t *testing.T) {
			schema := testSchema(t)
			if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+" AUTHORIZATION "+r); err != nil {
				t.Fatal(err)
			}
			c := Config{URL: scanURL(t, "role="+role), Schema: schema, MaxConns: 2}
			if how == "search_path" {
				c = Config{URL: scanURL(t, "role="+role+"&search_path="+schema), MaxConns: 2}
			}
			s, err := Open(ctx, c)
			if err != nil {
				t.Fatalf("open as %s, owner of the existing schema %s: %v", role, schema, err)
			}
			defer s.Close()
			if s.Schema() != schema {
				t.Fatalf("the ledger is in %q, want %q", s.Schema(), schema)
			}
			var owner string
			if err := conn.QueryRow(ctx, "SELECT tableowner FROM pg_tables WHERE schemaname = $1 AND tablename = 'effectfence_records'", schema).Scan(&owner); err != nil {
				t.Fatalf("the ledger's records table in %s: %v", schema, err)
			}
			if owner != role {
				t.Fatalf("the records table belongs to %s, want %s", owner, role)
			}
			e := fence.New(s, fence.Config{})
			adm, err := e.Prepare(ctx, fence.Request{Intent: "existing-schema:" + how, Tool: "charge", Args: []byte(`{"amount":1}`)})
			if err != nil || adm.Ticket == nil {
				t.Fatalf("a fresh call in the role's ledger: %v (%+v)", err, adm)
			}
			if _, err := e.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`)); err != nil {
				t.Fatalf("its commit: %v", err)
			}
		})
	}
	t.Run("missing schema", func(t *testing.T) {
		schema := testSchema(t) // never created: the role may not create it
		_, err := Open(ctx, Config{URL: scanURL(t, "role="+role), Schema: schema, MaxConns: 2})
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("open of a schema the role may not create: %v, want PostgreSQL's permission denied", err)
		}
	})
}
