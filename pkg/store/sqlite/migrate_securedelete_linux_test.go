package sqlite_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// writtenBytes is what this process has written so far (wchar in /proc/self/io).
func writtenBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no wchar in /proc/self/io")
	return 0
}

// TestMigrationWritesNoZeroedPages: migrating a schema-1 ledger copies its records and drops
// the old table; with secure_delete on, every page the drop freed was written again as zeros
// (a 23 MB ledger: 87 MB written instead of 15). The migration runs without it, and the store
// deletes securely afterwards: a record swept after the migration leaves no bytes in the file.
func TestMigrationWritesNoZeroedPages(t *testing.T) {
	path := copyV1(t)
	growV1(t, path, 5000)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	before := writtenBytes(t)
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	written := writtenBytes(t) - before
	t.Logf("migrating a %d KB ledger wrote %d KB", fi.Size()>>10, written>>10)
	if written > fi.Size()*3/2 {
		t.Errorf("migrating a %d KB ledger wrote %d KB: the old table's freed pages were written again", fi.Size()>>10, written>>10)
	}
	eng := fence.New(st, fence.Config{ResultTTL: time.Millisecond})
	defer eng.Close()
	if _, err := eng.Sweep(ctx); err != nil { // the fixture's own expired outcomes
		t.Fatal(err)
	}
	mark := "secret-after-migration-"
	args := []byte(fmt.Sprintf(`{"card":%q}`, strings.Repeat(mark, 4000/len(mark))))
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "after", Tool: "charge_card", Args: args})
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if n, err := eng.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("swept %d, %v; want 1", n, err)
	}
	file := sqlite.OnDisk(t, path)
	if i := bytes.Index(file, []byte(mark)); i >= 0 {
		t.Errorf("a record swept after the migration is still in the ledger file, at byte %d: secure_delete was not set again", i)
	}
}
