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

// The queries of Recover, `ledger ls --state` and Sweep each read an index in the order they
// want (recordIndexes), not every record of a state sorted on every page: records that are not
// done by state and intent from records_life (those without an expiry, the rest being few and
// sorted), done ones by intent from the intent's index, expired outcomes by expiry from
// records_life.
func TestScanQueriesUseIndexes(t *testing.T) {
	path, eng := newLedger(t)
	eng.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const (
		openRun  = "INDEX records_life (state=? AND expires_at=? AND intent>?)"
		byIntent = "INDEX sqlite_autoindex_records_1 (intent>?)"
	)
	for _, c := range []struct {
		f      fence.Filter
		index  string
		sorted bool // the plan may sort (what it sorts is not every record of a state)
	}{
		{fence.Filter{States: []fence.State{fence.StateInFlight}}, openRun, true},
		{fence.Filter{States: []fence.State{fence.StateFailed, fence.StateUnknown}}, openRun, true},
		{fence.Filter{States: []fence.State{fence.StateInFlight, fence.StateUnknown, fence.StateInFlight}}, openRun, true},
		{fence.Filter{States: []fence.State{fence.StateInFlight, fence.StateUnknown}, ExpiresBefore: time.Now()}, "INDEX records_life (state=? AND expires_at>? AND expires_at<?)", true},
		{fence.Filter{States: []fence.State{fence.StateDone}}, byIntent, false},
		{fence.Filter{States: []fence.State{fence.StateDone, fence.StateInFlight}}, byIntent, false},
		{fence.Filter{States: []fence.State{fence.StateDone}, ExpiresBefore: time.Now()}, "INDEX records_life (state=? AND expires_at>? AND expires_at<?)", true},
		// Sweep's batch: read in the index's order, with no sort of every expired record.
		{fence.Filter{States: []fence.State{fence.StateDone}, ExpiresBefore: time.Now(), Limit: 1000, ByExpiry: true}, "INDEX records_life (state=? AND expires_at>? AND expires_at<?)", false},
		{fence.Filter{States: []fence.State{fence.StateDone}, Limit: 10, ByExpiry: true}, "INDEX records_life (state=? AND expires_at>?)", false},
	} {
		q, args := scanQuery(c.f)
		if c.f.ByExpiry {
			args = append(args, 10)
		} else {
			args = append(args, "", 10)
		}
		all := queryPlan(t, db, q, args...)
		if !strings.Contains(all, c.index) {
			t.Errorf("%+v: plan %q does not read %s", c.f, all, c.index)
		}
		if !c.sorted && strings.Contains(all, "TEMP B-TREE") {
			t.Errorf("%+v: plan %q sorts", c.f, all)
		}
		if strings.Contains(all, "SCAN records") {
			t.Errorf("%+v: plan %q reads every record", c.f, all)
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
	t.Parallel()
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
	allowed := []string{"meta", "records", "sqlite_autoindex_records_1", "records_life", "sqlite_schema", "new", "|commit"}
	for _, p := range pages {
		if !slices.Contains(allowed, p) {
			t.Fatalf("a decision wrote a page of %s; WAL frames: %v", p, pages)
		}
	}
	// Only the claims write meta (their tokens): the counters wait for them, where they made
	// every commit write that page too (fence.CountersDeferred).
	var txns, frames, withMeta int
	var meta bool
	for _, p := range pages {
		switch p {
		case "|commit":
			txns++
			if meta {
				withMeta++
			}
			meta = false
		case "meta":
			meta = true
			frames++
		default:
			frames++
		}
	}
	if txns != 40 || withMeta != 20 {
		t.Fatalf("20 decisions made %d transactions, %d of them writing meta; want 40 and 20 (the claims). WAL frames: %v", txns, withMeta, pages)
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
	want := []string{"records_life", "sqlite_autoindex_records_1"}
	if got := recordsIndexes(t, db); !slices.Equal(got, want) {
		t.Fatalf("a new ledger's records indexes: %v, want %v", got, want)
	}
	// What the previous build's migration to schema 2 left.
	_, err = db.ExecContext(ctx, `DROP INDEX records_life;
		CREATE INDEX records_expires ON records(expires_at) WHERE expires_at IS NOT NULL;
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
	// A read transaction of db's, across the open: an open of a log no other process uses
	// copies it into the file and empties it (syncLog), whatever it commits; one held back
	// by a reader keeps it, and the count shows what the open committed.
	rtx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback()
	var n int
	if err := rtx.QueryRowContext(ctx, "SELECT count(*) FROM records").Scan(&n); err != nil {
		t.Fatal(err)
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

// A ledger of the builds before 2026-12-06 (records_open and records_expires) gets
// records_life at its next open for writing (recordIndexes), its records and version
// unchanged, and answers the same. Those builds can still open it: their index statements put
// records_open back beside records_life, and their queries then read an index in order, as
// they did on their own layout: records_open for open states, records_life for the sweep.
func TestAnEarlierBuildsQueriesUseRecordsLife(t *testing.T) {
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
	// The earlier builds' layout, as their opens for writing left it.
	const earlier = `DROP INDEX IF EXISTS records_state;
DROP INDEX IF EXISTS records_cert_hash;
CREATE INDEX IF NOT EXISTS records_open ON records(state, intent) WHERE state <> 'done';`
	if _, err := db.ExecContext(ctx, `DROP INDEX records_life;
CREATE INDEX records_expires ON records(expires_at) WHERE expires_at IS NOT NULL;`+earlier); err != nil {
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
	if got, want := recordsIndexes(t, db), []string{"records_life", "sqlite_autoindex_records_1"}; !slices.Equal(got, want) {
		t.Fatalf("after reopening, the records indexes are %v, want %v", got, want)
	}
	// An earlier build opens it again: its statements keep records_life and add records_open.
	if _, err := db.ExecContext(ctx, earlier); err != nil {
		t.Fatal(err)
	}
	if got, want := recordsIndexes(t, db), []string{"records_life", "records_open", "sqlite_autoindex_records_1"}; !slices.Equal(got, want) {
		t.Fatalf("after the earlier build's index statements, the records indexes are %v, want %v", got, want)
	}
	// Its queries, as it wrote them: a page of open records and a sweep's batch.
	for _, c := range []struct {
		q     string
		args  []any
		index string
	}{
		{"SELECT intent, body FROM records WHERE state IN (?) AND state <> 'done' AND intent > ? ORDER BY intent LIMIT ?", []any{"in_flight", "", 256}, "INDEX records_open"},
		{qSweepExpired, []any{time.Now().UnixNano(), 100}, "INDEX records_life"},
	} {
		plan := queryPlan(t, db, c.q, c.args...)
		if !strings.Contains(plan, c.index) || strings.Contains(plan, "TEMP B-TREE") || strings.Contains(plan, "SCAN records") {
			t.Errorf("an earlier build's %q: plan %q, want %s in its order", c.q, plan, c.index)
		}
	}
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q %v", check, err)
	}
}

// queryPlan is SQLite's plan of q, its lines joined by "; ".
func queryPlan(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

// A page of several open states is merged from one branch per state (openStatesQuery): across
// Scan's pages of 256, from a resume point and up to a limit, it lists exactly the records of
// those states, each once, in intent order, as one query over them all did.
func TestScanOfSeveralStatesMergesInOrder(t *testing.T) {
	t.Parallel()
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
	// Every fifth record that is not done carries an expiry, as a record keeps its done
	// record's when it is marked unknown: records_life files it apart from the others of its
	// state, and the scan reads both runs (openStatesQuery).
	err := eng.Store().Update(ctx, func(tx fence.Tx) error {
		for i, intent := range open {
			if i%5 != 0 {
				continue
			}
			rec, err := tx.Get(intent)
			if err != nil {
				return err
			}
			rec.ExpiresAt = tx.Now().Add(time.Duration(len(open)-i) * time.Minute)
			if err := tx.Put(rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	inFlight := slices.Sorted(slices.Values(want[fence.StateInFlight]))
	for _, c := range []struct {
		states []fence.State
		after  string
		limit  int
	}{
		{nil, "", 0}, {nil, "", 300}, {nil, open[100], 0}, {nil, open[299], 257}, {nil, open[len(open)-1], 0}, {nil, "i0350", 5},
		{[]fence.State{fence.StateInFlight}, "", 0}, {[]fence.State{fence.StateInFlight}, inFlight[10], 0}, {[]fence.State{fence.StateInFlight}, "", 7},
	} {
		states, list := c.states, inFlight
		if states == nil {
			states, list = []fence.State{fence.StateFailed, fence.StateInFlight, fence.StateFailed}, open
		}
		var got []string
		err := eng.Store().View(ctx, func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: states, After: c.after, Limit: c.limit},
				func(r *fence.Record) bool {
					if !slices.Contains(states, r.State) {
						t.Errorf("%s is %s", r.Intent, r.State)
					}
					got = append(got, r.Intent)
					return true
				})
		})
		if err != nil {
			t.Fatal(err)
		}
		exp := list[sort.SearchStrings(list, c.after+"\x00"):]
		if c.after == "" {
			exp = list
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
