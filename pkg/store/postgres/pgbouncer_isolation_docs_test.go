package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestTransactionPoolerStricterIsolationCreatesNothing: docs/postgres.md says the store refuses
// to open, before it creates anything, when its session is not at READ COMMITTED. A role set
// up as the page advises for a pooler in transaction mode (its search_path names the ledger's
// schema) but whose default isolation is stricter is refused, and the schema it reaches holds
// no ledger table afterwards: a refused open leaves nothing an operator must clean up or that
// a later open would take for a ledger.
func TestTransactionPoolerStricterIsolationCreatesNothing(t *testing.T) {
	role, schema := poolerRole(t, true)
	port := startPgBouncer(t, role)
	adm := admin(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := adm.Exec(ctx, "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+" SET default_transaction_isolation = 'repeatable read'"); err != nil {
		t.Fatal(err)
	}
	u := poolerURL(t, role, port, map[string]string{"default_query_exec_mode": "exec", "pool_max_conns": "2"})
	s, err := Open(ctx, Config{URL: u})
	if err == nil {
		s.Close()
		t.Fatal("Open through the pooler with the role's default isolation repeatable read succeeded")
	}
	if !strings.Contains(err.Error(), "default_transaction_isolation") {
		t.Fatalf("Open refused without naming the isolation: %v", err)
	}
	var tables []string
	rows, err := adm.Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1", schema)
	if err != nil {
		t.Fatal(err)
	}
	if tables, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(tables) > 0 {
		t.Errorf("Open refused the session's isolation but had created, in schema %s: %s", schema, strings.Join(tables, ", "))
	}
}
