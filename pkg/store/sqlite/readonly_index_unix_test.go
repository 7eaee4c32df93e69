//go:build unix

package sqlite_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// A ledger file that was read-only (a copy restored 0400, a ledger frozen on purpose) is
// refused as not writable, and `ledger check` is named as what can still read it. A read-only
// open of the library (and, before 2026-12-06, that check: TestCheckLeavesNothingBesideALedgerAtRest)
// leaves an index (LEDGER-shm) beside the file, which SQLite makes with the file's
// permissions: read-only. Once the file is made writable again, every open was refused as
// "read-only for this process" with the advice to give the fence another writable file,
// which would be a new, empty ledger that replays nothing (its calls run again), while the
// file itself was writable. The refusal now names the read-only index and how to make it
// writable.
func TestReadOnlyIndexLeftByACheckIsNamed(t *testing.T) {
	if os.Getenv("EFFECTFENCE_TEST_AS_CHILD") == "" && os.Geteuid() == 0 {
		runAsNobody(t, "TestReadOnlyIndexLeftByACheckIsNamed", func(base string) []string {
			path := filepath.Join(base, "ledger.db")
			seedLedger(t, path, 3)
			if err := os.Chmod(path, 0o400); err != nil {
				t.Fatal(err)
			}
			return []string{base, path}
		})
		return
	}
	base := os.Getenv("EFFECTFENCE_TEST_DIR")
	if base == "" {
		base = t.TempDir()
		path := filepath.Join(base, "ledger.db")
		seedLedger(t, path, 3)
		if err := os.Chmod(path, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(base, "ledger.db")
	if err := useLedger(path); err == nil || !strings.Contains(err.Error(), "ledger check") {
		t.Fatalf("the read-only ledger: %v", err)
	}
	r, err := sqlite.Check(ctx, path)
	if err != nil || !r.OK {
		t.Fatalf("ledger check of the read-only ledger: %v %+v", err, r)
	}
	st, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("a read-only open of the read-only ledger: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + "-shm")
	if err != nil || fi.Mode().Perm()&0o200 != 0 {
		t.Fatalf("the read-only open left no read-only index (%v, %v)", err, fi)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	err = useLedger(path)
	if err == nil || !strings.Contains(err.Error(), path+"-shm") || !strings.Contains(err.Error(), "chmod") || strings.Contains(err.Error(), "give it a writable file") {
		t.Fatalf("the ledger made writable again, beside the read-only index its check left: %v; want the index named, with chmod", err)
	}
	if err := os.Chmod(path+"-shm", 0o600); err != nil {
		t.Fatal(err)
	}
	if err := useLedger(path); err != nil {
		t.Fatalf("after chmod of the index, as the refusal says: %v", err)
	}
}
