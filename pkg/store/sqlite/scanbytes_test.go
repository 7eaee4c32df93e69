package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestScanPageIsBoundedInBytes: a SQLite Scan's page ends at 8 MiB of records, on a real file
// (fencetest.CheckScanPageIsBoundedInBytes; before 2026-12-07 it was 256 records whatever
// their size).
func TestScanPageIsBoundedInBytes(t *testing.T) {
	fencetest.CheckScanPageIsBoundedInBytes(t, openT(t, filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{}))
}
