package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// The queries of Recover, `ledger ls --state` and Sweep each use an index (recordIndexes), not a
// scan of every record: records_open for states that are not done, records_expires for
// expired outcomes.
func TestScanQueriesUseIndexes(t *testing.T) {
	ctx := context.Background()
	path, eng := newLedger(t)
	eng.Close()
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
		{fence.Filter{States: []fence.State{fence.StateInFlight, fence.StateUnknown, fence.StateInFlight}}, "records_open"},
		{fence.Filter{States: []fence.State{fence.StateInFlight, fence.StateUnknown}, ExpiresBefore: time.Now()}, "records_open"},
		{fence.Filter{States: []fence.State{fence.StateDone}, ExpiresBefore: time.Now()}, "records_expires"},
		// Sweep's batch: read in the index's order, with no sort of every expired record.
		{fence.Filter{States: []fence.State{fence.StateDone}, ExpiresBefore: time.Now(), Limit: 1000, ByExpiry: true}, "records_expires"},
		{fence.Filter{Limit: 10, ByExpiry: true}, "records_expires"},
	} {
		q, args := scanQuery(c.f)
		if c.f.ByExpiry {
			args = append(args, 10)
		} else {
			args = append(args, "", 10)
		}
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
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
		// A page is read in the index's order: no sort of every record after the page's first
		// intent (records_open is ordered by intent within a state; several states merge).
		if (c.f.ByExpiry || c.index == "records_open") && strings.Contains(strings.Join(plan, "; "), "TEMP B-TREE") {
			t.Errorf("%+v: plan %q sorts", c.f, plan)
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
// indexes they must keep: no index leaf per record state or per cert hash (recordIndexes). Each
// page is a WAL frame written before an fsync: this is what the schema saves per decision.
// newLedger opens a new ledger file and an engine over it, closed when the test ends.
func newLedger(t *testing.T) (path string, eng *fence.Engine) {
	t.Helper()
	return newLedgerWith(t, fence.Config{})
}

// newLedgerWith is newLedger with an engine of cfg.
func newLedgerWith(t *testing.T, cfg fence.Config) (path string, eng *fence.Engine) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "ledger.db")
	st, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng = fence.New(st, cfg)
	t.Cleanup(func() { eng.Close() })
	return path, eng
}

// decide admits intent and commits it.
func decide(t *testing.T, eng *fence.Engine, intent string, args []byte) {
	t.Helper()
	ctx := context.Background()
	adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge_card", Args: args, Agent: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
}

func TestFreshDecisionWritesFewPages(t *testing.T) {
	ctx := context.Background()
	path, eng := newLedger(t)
	args := []byte(fmt.Sprintf(`{"memo":%q}`, strings.Repeat("x", 500)))
	for i := range 500 {
		decide(t, eng, fmt.Sprintf("warm:%04d", i), args)
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
		decide(t, eng, fmt.Sprintf("x:%04d", i), args)
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

// recordsIndexes lists the names of the records table's indexes, sorted.
func recordsIndexes(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT name FROM pragma_index_list('records') ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

// The index layout is not a schema version: a ledger that has the previous build's indexes
// (records_state, records_cert_hash) gets this build's at its next open for writing, with
// every record and the schema version unchanged, so the previous build, which checks only the
// version, still opens it after this build has.
func TestOpenSetsTheIndexLayoutWithoutANewVersion(t *testing.T) {
	ctx := context.Background()
	path, eng := newLedger(t)
	decide(t, eng, "a", []byte(`{}`))
	if _, err := eng.Prepare(ctx, fence.Request{Intent: "b", Tool: "t", Args: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	eng.Close()

	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := []string{"records_expires", "records_open", "sqlite_autoindex_records_1"}
	if got := recordsIndexes(t, db); !slices.Equal(got, want) {
		t.Fatalf("a new ledger's records indexes: %v, want %v", got, want)
	}
	// What the previous build's migration to schema 2 left.
	_, err = db.ExecContext(ctx, `DROP INDEX records_open;
		CREATE INDEX records_state ON records(state);
		CREATE INDEX records_cert_hash ON records(cert_hash) WHERE cert_hash IS NOT NULL;`)
	if err != nil {
		t.Fatal(err)
	}

	st, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	err = st.View(ctx, func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight}}, func(r *fence.Record) bool {
			states = append(states, r.Intent)
			return true
		})
	})
	if err != nil || !slices.Equal(states, []string{"b"}) {
		t.Fatalf("in-flight intents after the reopen: %v %v", states, err)
	}
	st.Close()
	if got := recordsIndexes(t, db); !slices.Equal(got, want) {
		t.Fatalf("after reopening, the records indexes are %v, want %v", got, want)
	}
	var v int
	if err := db.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = 'schema_version'").Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("schema_version %d (%v): the index layout is no version, want %d", v, err, SchemaVersion)
	}
	// Opening a ledger whose indexes are already these commits nothing: the WAL's frame count
	// (the wal-index header's mxFrame) stays. db keeps the WAL from being checkpointed away.
	frames := func() uint32 {
		shm, err := os.ReadFile(path + "-shm")
		if err != nil || len(shm) < 20 {
			t.Fatalf("reading the wal-index: %v", err)
		}
		return binary.NativeEndian.Uint32(shm[16:20])
	}
	before := frames()
	st, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if after := frames(); after != before {
		t.Errorf("an open that changes nothing committed %d WAL frames", after-before)
	}
}

// A ledger whose records_open is the earlier build's, on the state alone, gets the index on
// (state, intent) at its next open for writing (openIndexStale): `ledger ls --state` reads its
// pages in order from it. Its records and version are unchanged, and it answers the same; the
// earlier build's own index statements leave the new index as it is.
func TestOpenReplacesTheEarlierIndexOfOpenRecords(t *testing.T) {
	ctx := context.Background()
	path, eng := newLedger(t)
	decide(t, eng, "a", []byte(`{}`))
	for _, intent := range []string{"c", "b"} {
		if _, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "t", Args: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	eng.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	def := func() string {
		var s string
		if err := db.QueryRowContext(ctx, "SELECT sql FROM sqlite_schema WHERE name = 'records_open'").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	const current = "CREATE INDEX records_open ON records(state, intent) WHERE state <> 'done'"
	if got := def(); got != current {
		t.Fatalf("a new ledger's records_open: %q", got)
	}
	if _, err := db.ExecContext(ctx, `DROP INDEX records_open; CREATE INDEX records_open ON records(state) WHERE state <> 'done'`); err != nil {
		t.Fatal(err)
	}
	st, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = st.View(ctx, func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight, fence.StateUnknown}}, func(r *fence.Record) bool {
			got = append(got, r.Intent)
			return true
		})
	})
	st.Close()
	if err != nil || !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("open intents after the reopen: %v %v", got, err)
	}
	if got := def(); got != current {
		t.Fatalf("after reopening, records_open is %q, want %q", got, current)
	}
	// The earlier build's own index statements (its recordIndexes, run at each of its opens
	// for writing) keep this one: it does not put its index back.
	if _, err := db.ExecContext(ctx, `DROP INDEX IF EXISTS records_state;
DROP INDEX IF EXISTS records_cert_hash;
CREATE INDEX IF NOT EXISTS records_open ON records(state) WHERE state <> 'done';`); err != nil {
		t.Fatal(err)
	}
	if got := def(); got != current {
		t.Fatalf("after the earlier build's index statements, records_open is %q, want %q", got, current)
	}
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q %v", check, err)
	}
}

// A page of several open states is merged from one branch per state (openStatesQuery): across
// Scan's pages of 256, from a resume point and up to a limit, it lists exactly the records of
// those states, each once, in intent order, as one query over them all did.
func TestScanOfSeveralStatesMergesInOrder(t *testing.T) {
	ctx := context.Background()
	_, eng := newLedger(t)
	want := map[fence.State][]string{}
	for i := range 700 {
		intent := fmt.Sprintf("i%04d", (i*379)%700) // not in the order written
		switch i % 7 {
		case 0:
			decide(t, eng, intent, []byte(`{}`))
			want[fence.StateDone] = append(want[fence.StateDone], intent)
		case 1, 2, 3:
			if _, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "t", Args: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			want[fence.StateInFlight] = append(want[fence.StateInFlight], intent)
		default:
			adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "t", Args: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			if err := eng.Abort(ctx, *adm.Ticket, "declined"); err != nil {
				t.Fatal(err)
			}
			want[fence.StateFailed] = append(want[fence.StateFailed], intent)
		}
	}
	open := slices.Sorted(slices.Values(append(slices.Clone(want[fence.StateInFlight]), want[fence.StateFailed]...)))
	for _, c := range []struct {
		after string
		limit int
	}{{"", 0}, {"", 300}, {open[100], 0}, {open[299], 257}, {open[len(open)-1], 0}, {"i0350", 5}} {
		var got []string
		err := eng.Store().View(ctx, func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: []fence.State{fence.StateFailed, fence.StateInFlight, fence.StateFailed}, After: c.after, Limit: c.limit},
				func(r *fence.Record) bool {
					if r.State != fence.StateFailed && r.State != fence.StateInFlight {
						t.Errorf("%s is %s", r.Intent, r.State)
					}
					got = append(got, r.Intent)
					return true
				})
		})
		if err != nil {
			t.Fatal(err)
		}
		exp := open[sort.SearchStrings(open, c.after+"\x00"):]
		if c.after == "" {
			exp = open
		}
		if c.limit > 0 && len(exp) > c.limit {
			exp = exp[:c.limit]
		}
		if !slices.Equal(got, exp) {
			i := 0
			for i < len(got) && i < len(exp) && got[i] == exp[i] {
				i++
			}
			t.Errorf("after %q limit %d: %d records, want %d; they differ at the %dth: %q", c.after, c.limit, len(got), len(exp), i, got[i:min(i+3, len(got))])
		}
	}
}
