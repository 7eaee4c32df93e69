package sqlite_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestRescuedCopyOnlyTheUserReads: the copy a store makes of every receipt once its file was
// moved or deleted while in use holds what the ledger holds (arguments, results), so only its
// user may read it, as the ledger (docs/privacy.md): 0600, also beside a ledger in a directory
// its owner shares with others (0755, whose mode DECISIONS-sqlite leaves alone), where SQLite
// would have created it with its default mode (0644 under the usual umask).
func TestRescuedCopyOnlyTheUserReads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ledger.db")
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	adm, err := eng.Prepare(ctx, holderReq("rescue:1"))
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"api_key":"sk_live_rescued"}`)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".aside"); err != nil {
		t.Fatal(err)
	}
	_, err = eng.Prepare(ctx, holderReq("rescue:2"))
	var fe *sqlite.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("a claim once the file was moved: %v; want a FileError", err)
	}
	copies, _ := filepath.Glob(path + ".rescued-*")
	if len(copies) != 1 {
		t.Fatalf("copies %v (error %v); want one", copies, err)
	}
	if fi, err := os.Stat(copies[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the rescued copy %s has mode %v (%v); want 0600", copies[0], fi.Mode().Perm(), err)
	}
	rescued := fence.New(openT(t, copies[0], sqlite.Options{}), fence.Config{})
	if adm, err := rescued.Prepare(ctx, holderReq("rescue:1")); err != nil || adm.Fresh() {
		t.Fatalf("the copy does not replay the receipt: %+v %v", adm, err)
	}
}
