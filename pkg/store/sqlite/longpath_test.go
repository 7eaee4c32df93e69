//go:build unix

package sqlite_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestLongestPathSQLiteOpens: SQLite opens no path over 504 bytes (its 512 less the
// "-journal" it may append). A ledger path of 504 bytes is a ledger; one of 505 is refused
// saying so, and nothing is created (before, the open failed as "cannot be opened … check that
// the file and its directory are readable and writable" and left an empty file).
func TestLongestPathSQLiteOpens(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, strings.Repeat("d", 200), strings.Repeat("e", 200))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	name := func(n int) string { // a path of n bytes in dir
		return filepath.Join(dir, strings.Repeat("f", n-len(dir)-1-len(".db"))+".db")
	}
	if len(dir)+1+len("x.db") > 504 {
		t.Skipf("skipped: the temporary directory's path is too long (%d bytes) to reach the limit from below", len(base))
	}
	ok := name(504)
	st, err := sqlite.Open(ctx, ok, sqlite.Options{})
	if err != nil {
		t.Fatalf("a ledger path of %d bytes: %v", len(ok), err)
	}
	st.Close()
	long := name(505)
	_, err = sqlite.Open(ctx, long, sqlite.Options{})
	if err == nil || !strings.Contains(err.Error(), "is 505 bytes, and SQLite opens at most 504") {
		t.Fatalf("a ledger path of %d bytes: %v; want it refused, saying why", len(long), err)
	}
	if _, err := os.Stat(long); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused path was created: %v", err)
	}
}
