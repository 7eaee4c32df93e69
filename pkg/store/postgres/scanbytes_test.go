package postgres

import (
	"testing"

	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

// TestScanPageIsBoundedInBytes: a PostgreSQL Scan's cursor fetches about 8 MiB of rows a round
// trip after its first 4, on the real server (fencetest.CheckScanPageIsBoundedInBytes; before
// 2026-12-07 it fetched 256 rows whatever their size).
func TestScanPageIsBoundedInBytes(t *testing.T) {
	fencetest.CheckScanPageIsBoundedInBytes(t, openSchema(t, testSchema(t)))
}
