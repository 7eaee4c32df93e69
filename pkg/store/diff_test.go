package store_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store/postgres"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// The differential test lives here, the one package that imports every store: the same
// random sequences run on the memory store, a SQLite file and (with EFFECTFENCE_TEST_POSTGRES)
// a PostgreSQL schema, and every answer must agree (fencetest.Differential says how to replay
// a seed and run longer).

var (
	diffMemory = fencetest.DiffStore{Name: "memory", New: func(*testing.T) fence.Store { return fence.NewMemoryStore() }}
	diffSQLite = fencetest.DiffStore{Name: "sqlite", Durable: func(t *testing.T) func() fence.Store {
		path := filepath.Join(t.TempDir(), "ledger.db")
		return func() fence.Store {
			st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
	}}
	diffPostgres = fencetest.DiffStore{Name: "postgres", Durable: func(t *testing.T) func() fence.Store {
		url := pgtest.Ledger(t, "diff")
		return func() fence.Store {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := postgres.Open(ctx, postgres.Config{URL: url, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
	}}
)

func TestStoresAgree(t *testing.T) {
	fencetest.Differential(t, []fencetest.DiffStore{diffMemory, diffSQLite})
}

func TestStoresAgreePostgres(t *testing.T) {
	pgtest.URL(t) // skips, saying why, without a server
	fencetest.Differential(t, []fencetest.DiffStore{diffMemory, diffSQLite, diffPostgres})
}
