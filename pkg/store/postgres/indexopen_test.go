package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
)

// testRole creates a role without login that may use schema's tables (read and write rows,
// and the CREATE privileges Open's IF NOT EXISTS statements ask for even when there is
// nothing to create: on the database and the schema) but owns none of them, as an
// application role beside the ledger's owner; it is dropped when the test ends. Stores act as it through the URL's role
// setting (the test URL's user is a superuser).
func testRole(t *testing.T, schema string) string {
	t.Helper()
	ctx := context.Background()
	conn := admin(t, "")
	role := newRole(t, "effectfence_test_role", "NOLOGIN")
	r, s := pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "GRANT CREATE ON DATABASE "+pgx.Identifier{db}.Sanitize()+" TO "+r+
		"; GRANT USAGE, CREATE ON SCHEMA "+s+" TO "+r+
		"; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "+s+" TO "+r+
		"; GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA "+s+" TO "+r); err != nil {
		t.Fatal(err)
	}
	return role
}

// TestNonOwnerOpensVersion1Ledger: a role that may write the ledger's rows but does not own
// its tables opened a ledger of the previous build (version 1's record indexes) with that
// build; this build opens it too, and works on it, leaving the indexes to be replaced by an
// open as the owner. Replacing them needs ownership of the table, and the index set is not
// what the ledger's correctness depends on: the queries are the same on either set.
func TestNonOwnerOpensVersion1Ledger(t *testing.T) {
	ctx := context.Background()
	schema, conn := version1Ledger(t)
	role := testRole(t, schema)
	// A transaction of another process reads the records table throughout: the open does not
	// wait for it (PostgreSQL checks ownership before it locks the table for DROP INDEX), so
	// it does not queue the other processes' transactions behind its own on every open.
	reader := holdRecordsTable(t, schema)
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second) // a bound for a hang, not a speed
	s, err := Open(openCtx, Config{URL: scanURL(t, "role="+role), Schema: schema, MaxConns: 2})
	cancel()
	if err != nil {
		t.Fatalf("open as %s, which does not own the tables: %v", role, err)
	}
	defer s.Close()
	if _, err := reader.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	var who string
	if err := s.pool.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != role {
		t.Fatalf("the store acts as %q (%v), want %s", who, err, role)
	}
	e := fence.New(s, fence.Config{LeaseTTL: time.Hour, ResultTTL: time.Hour})
	decideOnce(t, e, "charge:1")
	if n, err := e.Recover(ctx); err != nil || n != 0 {
		t.Fatalf("recover: %d %v", n, err)
	}
	wantRecordIndexes(t, conn, schema, version1IndexSet, "record indexes after an open by a role that does not own them")
	// The owner's next open replaces them.
	openSchema(t, schema).Close()
	wantRecordIndexes(t, conn, schema, currentIndexSet, "record indexes after the owner opened the ledger")
}

// TestIndexReplaceBesideWriters: an open that replaces version 1's record indexes while other
// processes' transactions are under way waits for them and fails none of them, also in the
// one wait cycle it can join: a writer (w1) that holds the records table and waits for an
// intent's lock, held by a transaction (w2) whose next read of the table queues behind the
// open's DROP INDEX, which waits for w1. PostgreSQL finds the cycle after deadlock_timeout
// and lets w2's read go ahead of the open (the open's wait is only a queue position), so
// nobody is cancelled as a deadlock victim.
func TestIndexReplaceBesideWriters(t *testing.T) {
	ctx := context.Background()
	schema := testSchema(t)
	openSchema(t, schema).Close()
	w1, w2, obs := admin(t, schema), admin(t, schema), admin(t, schema)
	if _, err := obs.Exec(ctx, version1Indexes+`;
INSERT INTO effectfence_records (intent, state, body) VALUES ('a', 'done', '\x7b7d'), ('b', 'done', '\x7b7d')`); err != nil {
		t.Fatal(err)
	}
	keyB := lockKey(schema, "intent", "b")
	waiting := func(pid uint32, what string) bool {
		var n int
		if err := obs.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted AND locktype = $2", pid, what).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	until := func(what string, cond func() bool) {
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s", what)
			}
		}
	}
	if _, err := w2.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", keyB); err != nil {
		t.Fatal(err)
	}
	w1Done := make(chan error, 1)
	go func() {
		_, err := w1.Exec(ctx, "BEGIN")
		if err == nil {
			_, err = w1.Exec(ctx, "UPDATE effectfence_records SET body = body WHERE intent = 'a'")
		}
		if err == nil {
			_, err = w1.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", keyB)
		}
		if err == nil {
			_, err = w1.Exec(ctx, "COMMIT")
		}
		w1Done <- err
	}()
	until("w1 to wait for intent b's lock", func() bool { return waiting(w1.PgConn().PID(), "advisory") })
	opened := make(chan error, 1)
	go func() {
		s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, MaxConns: 1})
		if err == nil {
			s.Close()
		}
		opened <- err
	}()
	until("the open to wait for the records table", func() bool {
		var pid uint32
		return obs.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE NOT granted AND locktype = 'relation'
			AND relation = 'effectfence_records'::regclass AND mode = 'AccessExclusiveLock'`).Scan(&pid) == nil
	})
	w2Done := make(chan error, 1)
	go func() {
		_, err := w2.Exec(ctx, "SELECT body FROM effectfence_records WHERE intent = 'b'")
		if err == nil {
			_, err = w2.Exec(ctx, "COMMIT")
		}
		w2Done <- err
	}()
	queued := false
	for w2Err := error(nil); ; time.Sleep(5 * time.Millisecond) {
		select {
		case w2Err = <-w2Done:
			if w2Err != nil {
				t.Fatalf("w2: %v", w2Err)
			}
		default:
			queued = queued || waiting(w2.PgConn().PID(), "relation")
			continue
		}
		break
	}
	if !queued {
		t.Fatal("w2's read never queued behind the open: the cycle was not reached")
	}
	if err := <-w1Done; err != nil {
		t.Fatalf("w1: %v", err)
	}
	if err := <-opened; err != nil {
		t.Fatalf("open: %v", err)
	}
	wantRecordIndexes(t, obs, schema, currentIndexSet, "record indexes after the open")
}

// TestConcurrentOpensReplaceIndexesOnce: stores opening a ledger with version 1's record
// indexes at once, while another store's engine commits, all open, the indexes are replaced
// once, and no commit fails. The migration lock and the IF (NOT) EXISTS of recordIndexes
// each keep the openers from tripping over each other; without both, all but one fail
// ("relation effectfence_records_open already exists").
func TestConcurrentOpensReplaceIndexesOnce(t *testing.T) {
	ctx := context.Background()
	schema := testSchema(t)
	writer := openSized(t, schema, 4)
	conn := admin(t, schema)
	if _, err := conn.Exec(ctx, version1Indexes); err != nil {
		t.Fatal(err)
	}
	e := fence.New(writer, fence.Config{LeaseTTL: time.Hour, ResultTTL: time.Hour})
	stop := make(chan struct{})
	commits := make(chan error, 2)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				if i == 0 {
					commits <- fmt.Errorf("no commit ran")
				}
				commits <- nil
				return
			default:
			}
			adm, err := e.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("w:%d", i), Tool: "t", Args: []byte(`{}`)})
			if err == nil && !adm.Fresh() {
				err = fmt.Errorf("not fresh: %+v", adm)
			}
			if err == nil {
				_, err = e.Commit(ctx, *adm.Ticket, []byte(`1`))
			}
			if err != nil {
				commits <- err
				return
			}
		}
	}()
	const openers = 4
	errs := make(chan error, openers)
	for range openers {
		go func() {
			s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, MaxConns: 1})
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range openers {
		if err := <-errs; err != nil {
			t.Errorf("open: %v", err)
		}
	}
	close(stop)
	if err := <-commits; err != nil {
		t.Fatalf("commits beside the opens: %v", err)
	}
	wantRecordIndexes(t, conn, schema, currentIndexSet, "record indexes after the opens")
}

// TestIndexReplaceGivesUpBehindALongTransaction: an open that would replace version 1's
// record indexes while another process's transaction holds the records table (a long export,
// say) waits for it at most indexLockWait, then leaves the indexes as they are and opens:
// waiting on, it would queue every other process's reads and writes of the table behind its
// DROP INDEX for as long as that transaction lasts. Once the table is free, the next open
// replaces them.
func TestIndexReplaceGivesUpBehindALongTransaction(t *testing.T) {
	ctx := context.Background()
	schema, conn := version1Ledger(t)
	reader := holdRecordsTable(t, schema)
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second) // a bound for a hang, not a speed
	s, err := Open(openCtx, Config{URL: testURL(t), Schema: schema, MaxConns: 2})
	cancel()
	if err != nil {
		t.Fatalf("open beside a transaction holding the records table: %v", err)
	}
	e := fence.New(s, fence.Config{})
	decideOnce(t, e, "charge:1")
	s.Close()
	wantRecordIndexes(t, conn, schema, version1IndexSet, "record indexes after an open that could not have the table")
	if _, err := reader.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	openSchema(t, schema).Close()
	wantRecordIndexes(t, conn, schema, currentIndexSet, "record indexes after an open with the table free")
}

// The record index sets: version 1's, and this build's (recordIndexes).
var (
	version1IndexSet = []string{"effectfence_records_cert", "effectfence_records_expiry", "effectfence_records_state"}
	currentIndexSet  = []string{"effectfence_records_expiry", "effectfence_records_open"}
)

// wantRecordIndexes fails the test unless schema's records table has exactly the indexes want
// (besides its primary key).
func wantRecordIndexes(t *testing.T, conn *pgx.Conn, schema string, want []string, when string) {
	t.Helper()
	if got := recordIndexNames(t, conn, schema); !slices.Equal(got, want) {
		t.Fatalf("%s: %v, want %v", when, got, want)
	}
}

// holdRecordsTable starts a transaction of another process that has read the records table
// and holds it until the caller commits it on the returned connection.
func holdRecordsTable(t *testing.T, schema string) *pgx.Conn {
	t.Helper()
	reader := admin(t, schema)
	if _, err := reader.Exec(context.Background(), "BEGIN; SELECT count(*) FROM effectfence_records"); err != nil {
		t.Fatal(err)
	}
	return reader
}

// decideOnce admits intent as a fresh call and commits it.
func decideOnce(t *testing.T, e *fence.Engine, intent string) {
	t.Helper()
	ctx := context.Background()
	adm, err := e.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{}`)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare %s: %+v %v", intent, adm, err)
	}
	if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
}

// version1Ledger returns a fresh ledger schema whose records table has version 1's indexes,
// and a connection of the test's own to it.
func version1Ledger(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	schema := testSchema(t)
	openSchema(t, schema).Close()
	conn := admin(t, schema)
	if _, err := conn.Exec(context.Background(), version1Indexes); err != nil {
		t.Fatal(err)
	}
	return schema, conn
}
