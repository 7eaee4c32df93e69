package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "integrity check") || !strings.Contains(err.Error(), "effectfence ledger check") {
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

// BenchmarkOpen measures opening a ledger of 100k done records the size of wrap's (about 1.9
// KB stored: 0.45 KB of arguments, held by the record and its cert) for writing, quick_check
// included; b.SetBytes is the file's size, so MB/s is quick_check's pace through it.
// Reproduce: go test -run x -bench Open -benchtime 20x ./pkg/store/sqlite/
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const n = 100_000
	pad := strings.Repeat("lorem ipsum dolor sit amet ", 15)
	err = st.Update(ctx, func(tx fence.Tx) error {
		now := tx.Now()
		for i := range n {
			intent := fmt.Sprintf("wrap:memory:create_entities:%016x", i)
			args := fmt.Appendf(nil, `{"entities":[{"entityType":"order","name":"order-%07d","observations":[%q]}]}`, i, pad)
			rec := &fence.Record{Intent: intent, State: fence.StateDone, Fingerprint: fmt.Sprintf("%064x", i), Token: uint64(i + 1),
				Nonce: fmt.Sprintf("%032x", i), Owner: "host-a/4242/1733300000/8d7e2b1c-0a4f-4c55-9c1e-2f5b7d9e1a3c/4026531836", Agent: "agent-7",
				Tool: "create_entities", Args: args, Clock: fence.VectorClock{"agent-7": uint64(i + 1)},
				ClaimedAt: now, LeaseUntil: now.Add(time.Minute), UpdatedAt: now, ExpiresAt: now.Add(24 * time.Hour),
				Cert: &fence.Cert{Intent: intent, Tool: "create_entities", Args: args, Agent: "agent-7", Clock: fence.VectorClock{"agent-7": uint64(i + 1)},
					Result: []byte(`{"content":[{"type":"text","text":"created 1 entity"}]}`), Hash: fmt.Sprintf("%064x", i+1)}}
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
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, skip := range []bool{false, true} {
		b.Run(fmt.Sprintf("quick_check=%v", !skip), func(b *testing.B) {
			b.SetBytes(fi.Size())
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
