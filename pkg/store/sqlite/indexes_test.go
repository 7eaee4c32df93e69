package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// The queries of Recover, `ledger ls --state` and Sweep each use an index (schema 3), not a
// scan of every record: records_open for states that are not done, records_expires for
// expired outcomes.
func TestScanQueriesUseIndexes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		f     fence.Filter
		index string
	}{
		{fence.Filter{States: []fence.State{fence.StateInFlight}}, "records_open"},
		{fence.Filter{States: []fence.State{fence.StateFailed, fence.StateUnknown}}, "records_open"},
		{fence.Filter{States: []fence.State{fence.StateDone}, ExpiresBefore: time.Now()}, "records_expires"},
	} {
		q, args := scanQuery(c.f)
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, append(args, "", 10)...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if !strings.Contains(strings.Join(plan, "; "), "INDEX "+c.index) {
			t.Errorf("%+v: plan %q does not use %s", c.f, plan, c.index)
		}
	}
}

// walPages lists the b-tree of each page in the WAL's frames, in order, with "|commit" after
// the last page of each transaction ("new" for a page the table grew by since owner was read).
func walPages(t *testing.T, path string, owner map[uint32]string) []string {
	t.Helper()
	b, err := os.ReadFile(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 32 {
		return nil
	}
	size := int(binary.BigEndian.Uint32(b[8:]))
	var out []string
	for off := 32; off+24+size <= len(b); off += 24 + size {
		name, ok := owner[binary.BigEndian.Uint32(b[off:])]
		if !ok {
			name = "new"
		}
		out = append(out, name)
		if binary.BigEndian.Uint32(b[off+4:]) != 0 {
			out = append(out, "|commit")
		}
	}
	return out
}

// A fresh admission and its commit write the pages of the tables they change and of the few
// indexes they must keep: no index leaf per record state or per cert hash (schema 3). Each
// page is a WAL frame written before an fsync: this is what the schema saves per decision.
func TestFreshDecisionWritesFewPages(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng := fence.New(st, fence.Config{})
	defer eng.Close()
	args := []byte(fmt.Sprintf(`{"memo":%q}`, strings.Repeat("x", 500)))
	decide := func(intent string) {
		adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge_card", Args: args, Agent: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 500 {
		decide(fmt.Sprintf("warm:%04d", i))
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	owner := map[uint32]string{}
	rows, err := db.QueryContext(ctx, "SELECT name, pageno FROM dbstat")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var page uint32
		if err := rows.Scan(&name, &page); err != nil {
			t.Fatal(err)
		}
		owner[page] = name
	}
	rows.Close()
	if len(owner) == 0 {
		t.Fatal("dbstat lists no pages")
	}

	for i := range 20 {
		decide(fmt.Sprintf("x:%04d", i))
	}
	pages := walPages(t, path, owner)
	if n := slices.Index(pages, "|commit"); n < 0 {
		t.Fatal("no transaction in the WAL")
	}
	allowed := []string{"meta", "records", "sqlite_autoindex_records_1", "records_open", "records_expires", "sqlite_schema", "new", "|commit"}
	for _, p := range pages {
		if !slices.Contains(allowed, p) {
			t.Fatalf("a decision wrote a page of %s; WAL frames: %v", p, pages)
		}
	}
	var txns, frames int
	for _, p := range pages {
		if p == "|commit" {
			txns++
		} else {
			frames++
		}
	}
	t.Logf("%d transactions, %.1f pages each", txns, float64(frames)/float64(txns))
}
