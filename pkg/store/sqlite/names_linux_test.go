package sqlite_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestStoreClosedAfterItsFileMovedLeavesTheReceiptsInIt: SQLite does not copy the
// write-ahead log into a file that moved when it closes it; the log stays beside the old name,
// so the moved file lacked every receipt committed since the last checkpoint. The store does
// it at Close, even when no write of its own noticed the move.
func TestStoreClosedAfterItsFileMovedLeavesTheReceiptsInIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	st := openT(t, path, sqlite.Options{})
	eng := fence.New(st, fence.Config{})
	adm, err := eng.Prepare(ctx, holderReq("closed:1"))
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":1}`))
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(dir, "moved.db")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	again := fence.New(openT(t, moved, sqlite.Options{}), fence.Config{})
	adm, err = again.Prepare(ctx, holderReq("closed:1"))
	if err != nil || adm.Fresh() || adm.Cert.Hash != cert.Hash {
		t.Fatalf("the moved file, its store closed: fresh %v, %v; want the receipt %s", err == nil && adm.Fresh(), err, cert.Hash)
	}
	if _, err := sqlite.Open(ctx, path, sqlite.Options{}); err == nil || !strings.Contains(err.Error(), "write-ahead log") {
		t.Fatalf("the old path beside the log: %v; want it still refused", err)
	}
}
