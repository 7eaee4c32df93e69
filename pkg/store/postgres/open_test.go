package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestOpenerPostgres: EFFECTFENCE_LEDGER=postgres://… (with search_path naming a schema that
// does not exist yet) opens a working ledger through the one opener.
func TestOpenerPostgres(t *testing.T) {
	raw := os.Getenv("EFFECTFENCE_TEST_POSTGRES")
	if raw == "" {
		t.Skip("SKIP-REQUIRED: EFFECTFENCE_TEST_POSTGRES is not set")
	}
	schema := fmt.Sprintf("effectfence_opener_%d", os.Getpid())
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	u.Scheme = "postgresql"
	ctx := context.Background()
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, raw)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	t.Setenv(store.EnvLedger, u.String())
	o, err := store.FromEnv("server")
	if err != nil {
		t.Fatal(err)
	}
	led, err := store.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	if !strings.HasPrefix(led.Location, "postgresql://") {
		t.Fatalf("location %q", led.Location)
	}
	adm, err := led.Prepare(ctx, fence.Request{Intent: "opener:1", Tool: "t"})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	var n int
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "effectfence_records"}.Sanitize()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("records in %s: %d %v", schema, n, err)
	}
}
