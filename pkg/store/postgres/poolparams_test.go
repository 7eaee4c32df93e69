package postgres

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestPoolMinimumAboveItsSizeIsRefused: docs/postgres.md's pool parameters, pool_max_conns=N
// (default 16) and pool_min_conns=M, with M above N: Open refuses it at once, naming both and
// no password, and creates nothing. Before, pgxpool took it and Open's warm-up waited for M
// connections from a pool of N: Open hung until its context ended (wrap's never does), then
// returned a store as if nothing were wrong.
func TestPoolMinimumAboveItsSizeIsRefused(t *testing.T) {
	schema := testSchema(t)
	for _, params := range []string{"pool_max_conns=2&pool_min_conns=4", "pool_min_conns=17"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		url := strings.Replace(scanURL(t, "search_path="+schema+"&"+params), "postgres@", "postgres:s3cret@", 1)
		s, err := Open(ctx, Config{URL: url})
		late := ctx.Err()
		cancel()
		if err == nil {
			s.Close()
			t.Fatalf("%s: opened", params)
		}
		if late != nil || !strings.Contains(err.Error(), "pool_min_conns") || !strings.Contains(err.Error(), "pool_max_conns") || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("%s: %v (context: %v), want an error at once naming both parameters and no password", params, err, late)
		}
	}
	var n int
	if err := admin(t, "").QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s: %d %v, want nothing created", schema, n, err)
	}
}
