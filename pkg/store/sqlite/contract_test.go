package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

func openT(t testing.TB, path string, opt sqlite.Options) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, opt)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestContract(t *testing.T) {
	t.Parallel()
	fencetest.Run(t, func(t *testing.T) fence.Store {
		return openT(t, filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{})
	})
}

func TestContractDurable(t *testing.T) {
	fencetest.RunDurable(t, func(t *testing.T) func() fence.Store {
		path := filepath.Join(t.TempDir(), "ledger.db")
		return func() fence.Store { return openT(t, path, sqlite.Options{}) }
	})
}
