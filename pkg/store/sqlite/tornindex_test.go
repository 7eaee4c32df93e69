package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// checkpointed folds the ledger's write-ahead log into its file and returns the file's bytes.
func checkpointed(t *testing.T, path string) []byte {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pragmaLines runs a checking pragma over a plain connection and returns its lines.
func pragmaLines(t *testing.T, path, pragma string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(pragma)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "; ")
}

// TestLedgerWhoseIntentIndexLostAWriteIsRefused: a torn ledger whose index of intents holds an
// older version of its page (a write that never reached the disk, a copy taken while a
// checkpoint wrote the file) while the table holds the newer rows. Every page is sound on its
// own, so PRAGMA quick_check passes: it checks pages and b-trees, not that an index holds its
// table's rows. But every lookup of an intent goes through that index, so the done call it
// lacks read as new: before, the ledger opened for writing, the identical call was admitted
// (run a second time) and its claim written beside the done record, the intent's two rows
// then both in the file.
func TestLedgerWhoseIntentIndexLostAWriteIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedLedger(t, path, 3)
	// A call an operator clears later: the old page holds its entry, so it holds as many
	// entries as the table has rows (quick_check counts them).
	st := openT(t, path, sqlite.Options{})
	eng := fence.New(st, fence.Config{})
	cleared := fence.Request{Intent: "torn:cleared", Tool: "charge", Args: []byte(`{"amount":100}`)}
	adm, err := eng.Prepare(ctx, cleared)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charged":"cleared"}`)); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	before := checkpointed(t, path)

	// The call the torn page forgets: done, its result recorded.
	st = openT(t, path, sqlite.Options{})
	eng = fence.New(st, fence.Config{})
	if _, err := eng.Clear(ctx, cleared.Intent, "test", "charged by mistake"); err != nil {
		t.Fatal(err)
	}
	req := fence.Request{Intent: "torn:charge", Tool: "charge", Args: []byte(`{"amount":4900}`)}
	adm, err = eng.Prepare(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charged":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	after := checkpointed(t, path)

	// The index's pages as they were before that call.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var pageSize int64
	var pages []int64
	err = db.QueryRow("PRAGMA page_size").Scan(&pageSize)
	if err == nil {
		var rows *sql.Rows
		rows, err = db.Query(`SELECT d.pageno FROM dbstat d JOIN sqlite_schema s ON s.name = d.name
			WHERE s.type = 'index' AND s.tbl_name = 'records' AND s.name LIKE 'sqlite_autoindex_%'`)
		for err == nil && rows.Next() {
			var p int64
			err = rows.Scan(&p)
			pages = append(pages, p)
		}
		if rows != nil {
			rows.Close()
		}
	}
	db.Close()
	if err != nil || len(pages) == 0 {
		t.Fatalf("finding the index of intents: %v (pages %v)", err, pages)
	}
	if len(before) != len(after) {
		t.Fatalf("the call grew the file (%d -> %d bytes): the old page would not fit the new file", len(before), len(after))
	}
	torn := append([]byte(nil), after...)
	for _, p := range pages {
		copy(torn[(p-1)*pageSize:p*pageSize], before[(p-1)*pageSize:p*pageSize])
	}
	if err := os.WriteFile(path, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	// The damage this test is about: sound pages, an index missing a row of its table.
	if got := pragmaLines(t, path, "PRAGMA quick_check"); got != "ok" {
		t.Fatalf("quick_check of the torn file: %s; want ok (the test's premise)", got)
	}
	if got := pragmaLines(t, path, "PRAGMA integrity_check"); got == "ok" {
		t.Fatal("integrity_check of the torn file: ok; want the missing index entry (the test's premise)")
	}
	sum := fileSum(t, path)

	st2, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err == nil {
		again, perr := fence.New(st2, fence.Config{}).Prepare(ctx, req)
		st2.Close()
		t.Fatalf("the torn ledger opened for writing; the done call's duplicate: %+v %v (fresh: %v)", again, perr, perr == nil && again.Fresh())
	}
	var fe *sqlite.FileError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "effectfence ledger check") {
		t.Fatalf("open of the torn ledger: %v; want a refusal with the ledger check hint", err)
	}
	if fileSum(t, path) != sum {
		t.Fatal("the refused open changed the file")
	}
	rep, err := sqlite.Check(ctx, path)
	if err != nil || rep.OK {
		t.Fatalf("ledger check of the torn file: %+v %v; want problems", rep, err)
	}
}
