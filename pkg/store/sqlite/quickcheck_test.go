package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// damageIndex overwrites the middle of a leaf page of one of the ledger's indexes (not its
// table): the file still opens and most lookups still work, the case issue 11 found written to.
func damageIndex(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var root, pageSize int64
	// The index with the most pages (one the seed records fill).
	err = db.QueryRow(`SELECT s.name, s.rootpage FROM sqlite_schema s JOIN dbstat d ON d.name = s.name
		WHERE s.type = 'index' GROUP BY s.name ORDER BY count(*) DESC, s.name LIMIT 1`).Scan(&name, &root)
	if err == nil {
		err = db.QueryRow("PRAGMA page_size").Scan(&pageSize)
	}
	// The index's pages: its root and the pages it points to (dbstat lists them).
	var page int64
	if err == nil {
		err = db.QueryRow("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno LIMIT 1", name).Scan(&page)
		if errors.Is(err, sql.ErrNoRows) {
			page, err = root, nil
		}
	}
	db.Close()
	if err != nil {
		t.Fatalf("finding an index page: %v", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := []byte(strings.Repeat("\xa5", int(pageSize)/2))
	if _, err := f.WriteAt(junk, (page-1)*pageSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return name
}

func TestOpenRefusesDamagedIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedLedger(t, path, 300)
	// seedLedger closes cleanly: fold the WAL into the file so the damage is not shadowed.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	index := damageIndex(t, path)
	before := fileSum(t, path)

	_, err = sqlite.Open(ctx, path, sqlite.Options{})
	var fe *sqlite.FileError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "quick integrity check") || !strings.Contains(err.Error(), "effectfence ledger check") {
		t.Fatalf("open of a ledger with a damaged index %s for writing: %v; want a refusal with the ledger check hint", index, err)
	}
	if fileSum(t, path) != before {
		t.Fatal("the refused open changed the file")
	}
	// Reading it stays possible for the operator.
	ro, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open for inspection: %v", err)
	}
	ro.Close()
	rep, err := sqlite.Check(ctx, path)
	if err != nil || rep.OK {
		t.Fatalf("ledger check of the damaged file: %+v %v; want problems", rep, err)
	}
}

// BenchmarkOpen measures opening a 100k-record ledger for writing, quick_check included.
// Reproduce: go test -run x -bench Open -benchtime 20x ./pkg/store/sqlite/
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const n = 100_000
	err = st.Update(ctx, func(tx fence.Tx) error {
		for i := range n {
			rec := &fence.Record{Intent: fmt.Sprintf("bench:%06d", i), State: fence.StateDone, Fingerprint: "fp", Token: uint64(i + 1),
				Tool: "charge", Args: []byte(fmt.Sprintf(`{"n":%d}`, i)),
				Cert: &fence.Cert{Intent: fmt.Sprintf("bench:%06d", i), Tool: "charge", Args: []byte(`{}`), Result: []byte(`{"ok":true}`), Hash: fmt.Sprintf("%064x", i)}}
			if err := tx.Put(rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	st.Close()
	for _, skip := range []bool{false, true} {
		b.Run(fmt.Sprintf("quick_check=%v", !skip), func(b *testing.B) {
			for b.Loop() {
				st, err := sqlite.Open(ctx, path, sqlite.Options{SkipQuickCheck: skip})
				if err != nil {
					b.Fatal(err)
				}
				st.Close()
			}
		})
	}
}
