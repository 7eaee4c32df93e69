package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestRoleWithoutUsageOfTheSchema: a role that may not use an existing ledger schema (no
// USAGE: PostgreSQL leaves the schema out of the role's search path) is refused at open with
// an error that says so and names the grant, whether the schema is named in Config.Schema or
// in the URL's search_path, by wrap's open and the ledger commands' (Existing). Before, wrap's
// open said the session's search_path reached "" first and to name the schema first in it,
// which the URL already did. Nothing is created, and with USAGE and CREATE granted the same
// role opens the ledger.
func TestRoleWithoutUsageOfTheSchema(t *testing.T) {
	ctx := context.Background()
	schema := testSchema(t)
	s := openSchema(t, schema)
	s.Close()
	role := newRole(t, "effectfence_test_nousage", "NOLOGIN")
	urls := map[string]Config{
		"config":      {URL: scanURL(t, "role="+role), Schema: schema, MaxConns: 2},
		"search_path": {URL: scanURL(t, "role="+role+"&search_path="+schema), MaxConns: 2},
	}
	for how, c := range urls {
		for _, existing := range []bool{false, true} {
			c.Existing = existing
			_, err := Open(ctx, c)
			var pe interface{ SQLState() string }
			switch {
			case err == nil:
				t.Fatalf("%s (existing %v): opened without USAGE on the schema", how, existing)
			case strings.Contains(err.Error(), "lacks USAGE") && strings.Contains(err.Error(), "GRANT USAGE"):
			case existing && errors.As(err, &pe) && pe.SQLState() == "42501" && strings.Contains(err.Error(), "permission denied for schema"):
			default:
				t.Errorf("%s (existing %v): %v, want a refusal naming the missing USAGE", how, existing, err)
			}
		}
	}
	var n int
	if err := admin(t, "").QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = $1)", role).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the refused role owns %d relations (%v), want 0", n, err)
	}
	if _, err := admin(t, "").Exec(ctx, "GRANT USAGE, CREATE ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" TO "+pgx.Identifier{role}.Sanitize()+
		"; GRANT ALL ON ALL TABLES IN SCHEMA "+pgx.Identifier{schema}.Sanitize()+" TO "+pgx.Identifier{role}.Sanitize()+
		"; GRANT ALL ON ALL SEQUENCES IN SCHEMA "+pgx.Identifier{schema}.Sanitize()+" TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for how, c := range urls {
		s, err := Open(ctx, c)
		if err != nil {
			t.Fatalf("%s: open after the grants: %v", how, err)
		}
		s.Close()
	}
}
