package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
)

// recordIndexNames lists the secondary indexes of the schema's effectfence_records.
func recordIndexNames(t *testing.T, conn *pgx.Conn, schema string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'effectfence_records' AND indexname <> 'effectfence_records_pkey' ORDER BY 1", schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// version1Indexes are the record indexes schema version 1 created, as the previous build left
// them in every ledger.
const version1Indexes = `DROP INDEX effectfence_records_open;
CREATE INDEX effectfence_records_state ON effectfence_records (state, intent);
CREATE INDEX effectfence_records_cert ON effectfence_records (cert_hash) WHERE cert_hash IS NOT NULL;`

// TestRecordIndexesReplaceVersion1s: a ledger of the previous build (version 1's indexes) with
// records in every state is opened by this build, which replaces the indexes and finds,
// lists, sweeps, recovers and verifies every record as before; the version stays 1, so the
// previous build still opens it.
func TestRecordIndexesReplaceVersion1s(t *testing.T) {
	ctx := context.Background()
	schema := testSchema(t)
	conn := admin(t, "")
	s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	wantRecordIndexes(t, conn, schema, currentIndexSet, "a new ledger's record indexes")
	// The previous build's ledger: version 1's indexes, written to before this build opens it.
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()+"; "+version1Indexes); err != nil {
		t.Fatal(err)
	}
	e := fence.New(s, fence.Config{LeaseTTL: time.Hour, ResultTTL: time.Hour})
	shortLived := fence.New(s, fence.Config{LeaseTTL: time.Hour, ResultTTL: 50 * time.Millisecond})
	req := func(intent string) fence.Request {
		return fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"amount":4900}`), Domain: "acct:" + intent}
	}
	fresh := func(e *fence.Engine, intent string) fence.Ticket {
		adm, err := e.Prepare(ctx, req(intent))
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare %s: %+v %v", intent, adm, err)
		}
		return *adm.Ticket
	}
	certs := map[string]*fence.Cert{}
	for i := range 3 {
		intent := fmt.Sprintf("done:%d", i)
		c, err := e.Commit(ctx, fresh(e, intent), []byte(`{"charge":"ch_1"}`))
		if err != nil {
			t.Fatal(err)
		}
		certs[intent] = c
	}
	if _, err := shortLived.Commit(ctx, fresh(shortLived, "expired"), []byte(`"old"`)); err != nil {
		t.Fatal(err)
	}
	fresh(e, "inflight:0")
	fresh(e, "inflight:1")
	if err := e.Abort(ctx, fresh(e, "failed"), "timeout"); err != nil {
		t.Fatal(err)
	}
	if err := e.Lost(ctx, fresh(e, "unknown"), "transport broke"); err != nil {
		t.Fatal(err)
	}
	wantRecordIndexes(t, conn, schema, version1IndexSet, "version 1's record indexes")
	s.Close()

	s = openSchema(t, schema)
	wantRecordIndexes(t, conn, schema, currentIndexSet, "record indexes after this build opened the ledger")
	var v int
	if err := conn.QueryRow(ctx, "SELECT version FROM effectfence_version").Scan(&v); err != nil || v != 1 {
		t.Fatalf("schema version %d (%v), want 1: the previous build must still open the ledger", v, err)
	}
	e = fence.New(s, fence.Config{LeaseTTL: time.Hour, ResultTTL: time.Hour})
	for intent, want := range map[string]fence.State{"done:0": fence.StateDone, "done:1": fence.StateDone, "done:2": fence.StateDone,
		"inflight:0": fence.StateInFlight, "inflight:1": fence.StateInFlight, "failed": fence.StateFailed, "unknown": fence.StateUnknown} {
		rec, err := e.Status(ctx, intent)
		if err != nil || rec.State != want {
			t.Fatalf("status of %s: %s %v; want %s", intent, rec.State, err, want)
		}
	}
	for intent, c := range certs {
		if _, err := e.Prepare(ctx, req(intent)); err != nil {
			t.Fatalf("replay of %s: %v", intent, err)
		}
		err := s.View(ctx, func(tx fence.Tx) error {
			rec, err := tx.CertByHash(c.Hash)
			if err == nil && (rec == nil || rec.Intent != intent) {
				err = fmt.Errorf("found %+v", rec)
			}
			return err
		})
		if err != nil {
			t.Fatalf("CertByHash of %s: %v", intent, err)
		}
	}
	for states, want := range map[string]string{
		"in_flight":      "inflight:0 inflight:1",
		"failed":         "failed",
		"unknown":        "unknown",
		"failed,unknown": "failed unknown",
		"done":           "done:0 done:1 done:2 expired",
		"":               "done:0 done:1 done:2 expired failed inflight:0 inflight:1 unknown",
	} {
		var st []fence.State
		for _, x := range strings.Split(states, ",") {
			if x != "" {
				st = append(st, fence.State(x))
			}
		}
		recs, err := ledger.List(ctx, s, st)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, r.Intent)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("list %q: %v; want %s", states, got, want)
		}
	}
	if n, err := e.Recover(ctx); err != nil || n != 0 {
		t.Fatalf("recover: %d %v; want 0 (both claims hold live leases)", n, err)
	}
	time.Sleep(100 * time.Millisecond) // "expired" outlives its 50 ms result TTL
	if n, err := e.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v; want 1", n, err)
	}
	rep, err := ledger.Verify(ctx, s)
	if err != nil || !rep.OK() || rep.Records != 7 || rep.Verified != 3 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	// The claims still commit, and new intents take the whole path.
	if _, err := e.Commit(ctx, fresh(e, "after"), []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Opening it again changes nothing.
	openSchema(t, schema)
	wantRecordIndexes(t, conn, schema, currentIndexSet, "record indexes after a second open")
}

// TestScanUsesOpenIndex: Scan's query for states that are not done can use
// effectfence_records_open in the plan PostgreSQL caches for it (a generic plan, which does
// not know the states); the sweep's query for done records uses the expiry index.
func TestScanUsesOpenIndex(t *testing.T) {
	ctx := context.Background()
	schema := testSchema(t)
	openSchema(t, schema).Close()
	conn := admin(t, schema)
	if _, err := conn.Exec(ctx, `INSERT INTO effectfence_records (intent, state, expires_at, body)
	SELECT 'r:' || i, CASE WHEN i % 100 = 0 THEN 'in_flight' ELSE 'done' END,
		CASE WHEN i % 100 = 0 THEN NULL ELSE now() + i * interval '1 second' END, '\x7b7d'
	FROM generate_series(1, 5000) i; ANALYZE effectfence_records`); err != nil {
		t.Fatal(err)
	}
	// Seq scans are priced out so the test does not depend on the table's size: what is
	// checked is which indexes the plan can use.
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	n := 0
	plan := func(f fence.Filter) string {
		q, args := scanQuery(f)
		n++
		name := fmt.Sprintf("scan%d", n)
		if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+q); err != nil {
			t.Fatal(err)
		}
		lits := make([]string, len(args)) // EXECUTE takes no parameters: its arguments are literals
		for i, a := range args {
			switch a := a.(type) {
			case string:
				lits[i] = quoteLiteral(a)
			case []string:
				for j := range a {
					a[j] = quoteLiteral(a[j])
				}
				lits[i] = "ARRAY[" + strings.Join(a, ", ") + "]"
			case time.Time:
				lits[i] = quoteLiteral(a.Format(time.RFC3339Nano)) + "::timestamptz"
			case int:
				lits[i] = strconv.Itoa(a)
			default:
				t.Fatalf("argument %T", a)
			}
		}
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+"("+strings.Join(lits, ", ")+")")
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	for _, f := range []fence.Filter{
		{States: []fence.State{fence.StateInFlight}},
		{States: []fence.State{fence.StateFailed, fence.StateUnknown}, After: "r:1"},
	} {
		if p := plan(f); !strings.Contains(p, "effectfence_records_open") {
			t.Errorf("scan of %v does not use effectfence_records_open:\n%s", f.States, p)
		}
	}
	if p := plan(fence.Filter{States: []fence.State{fence.StateDone, fence.StateInFlight}}); strings.Contains(p, "effectfence_records_open") {
		t.Errorf("scan including done records uses effectfence_records_open:\n%s", p)
	}
	// Sweep's batch (ByExpiry) reads the expiry index in its order: no sort of every expired
	// record before the first of the batch can come.
	for _, f := range []fence.Filter{
		{States: []fence.State{fence.StateDone}, ExpiresBefore: time.Now().Add(time.Hour), Limit: 1000, ByExpiry: true},
		{Limit: 10, ByExpiry: true},
	} {
		if p := plan(f); !strings.Contains(p, "effectfence_records_expiry") || strings.Contains(p, "Sort") {
			t.Errorf("scan %+v does not read effectfence_records_expiry in order:\n%s", f, p)
		}
	}
}
