package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectfence/effectfence/pkg/fence"
)

// schemaURL is the test server's URL with search_path=schema and extra query parameters, as
// a user writes EFFECTFENCE_LEDGER.
func schemaURL(t *testing.T, schema string, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// TestPoolSizeFromURL holds docs/postgres.md's "Pool size: pool_max_conns=N in the URL
// (default 16; 8 are opened up front)", through the URL alone, as pkg/store.Open passes it.
func TestPoolSizeFromURL(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	// At least min(8, max) are open when Open returns; the pool's own background start-up
	// may have opened a few more by then (measured 9-11 of 16), never more than max.
	for _, c := range []struct {
		params       map[string]string
		max, upFront int32
	}{
		{nil, 16, 8},
		{map[string]string{"pool_max_conns": "3"}, 3, 3},
		{map[string]string{"pool_max_conns": "40"}, 40, 8},
	} {
		s, err := Open(ctx, Config{URL: schemaURL(t, schema, c.params)})
		if err != nil {
			t.Fatal(err)
		}
		st := s.pool.Stat()
		if st.MaxConns() != c.max || st.TotalConns() < c.upFront || st.TotalConns() > c.max {
			t.Errorf("%v: pool of %d with %d open, want %d with at least %d open", c.params, st.MaxConns(), st.TotalConns(), c.max, c.upFront)
		}
		s.Close()
	}
}

// TestEveryIdleConnectionDead holds "The next call reconnects" (docs/postgres.md) for the
// case DECISIONS-postgres.md names: after a server restart every idle connection in the pool
// is dead. Every backend of a warmed pool is terminated; the next calls must neither fail nor
// run anything twice.
func TestEveryIdleConnectionDead(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: schemaURL(t, schema, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := fence.New(s, fence.Config{})
	kill := admin(t, "")
	killIdle := func(atLeast int) {
		t.Helper()
		conns := s.pool.AcquireAllIdle(ctx)
		if len(conns) < atLeast {
			t.Fatalf("%d idle connections, want at least %d", len(conns), atLeast)
		}
		var pids []int32
		for _, c := range conns {
			pids = append(pids, int32(c.Conn().PgConn().PID()))
			c.Release()
		}
		for _, pid := range pids {
			var ok bool
			if err := kill.QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", pid).Scan(&ok); err != nil {
				t.Fatalf("terminating %d: %v", pid, err)
			}
			if ok {
				continue
			}
			// false: no such backend, or it outlived the 5 s wait. A connection the pool had
			// not yet found dead (its backend terminated in an earlier round) is already
			// what this test wants; a backend still there is not.
			var alive bool
			if err := kill.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive); err != nil || alive {
				t.Fatalf("terminating %d: the backend is still there (%v)", pid, err)
			}
		}
	}
	killIdle(8) // the 8 opened up front
	r := fence.Request{Intent: "after-restart", Tool: "t"}
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatalf("first call after every idle connection died: %+v %v", adm, err)
	}
	// The effect ran; every connection dies again before its outcome is recorded (at least
	// 8, where the old bound of three retries tried 4).
	var held []*pgxpool.Conn
	for range 8 {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	killIdle(8)
	cert, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
	if err != nil {
		t.Fatal(err)
	}
	dup, err := e.Prepare(ctx, r)
	if err != nil || dup.Fresh() || dup.Cert.Hash != cert.Hash {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
}

// TestBadLedgerURLsGetClearErrors: a URL the ledger cannot use is refused at Open with a
// message that names what is wrong (and never the password); before, an empty search_path
// gave "can't scan into dest[0] (col: current_schema): cannot scan NULL into *string".
func TestBadLedgerURLsGetClearErrors(t *testing.T) {
	schema := testSchema(t)
	for _, c := range []struct {
		params map[string]string
		want   string
	}{
		{map[string]string{"pool_max_conns": "abc", "password": "secret"}, "pool_max_conns"},
		{map[string]string{"pool_max_conns": "0"}, "pool_max_conns too small"},
		{map[string]string{"search_path": ""}, "no schema is selected: set search_path in the URL"},
		{map[string]string{"search_path": "a.b"}, `search_path starts with "a.b", which is not a schema name (a qualified name has 2 parts)`},
	} {
		u := schemaURL(t, schema, c.params)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := Open(ctx, Config{URL: u})
		cancel()
		if err == nil {
			s.Close()
			t.Errorf("%v: opened", c.params)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%v: %v; want it to say %q, without the password", c.params, err, c.want)
		}
	}
	// A search_path set in options that names no schema: it is set, but names nothing the
	// session can use, and the store creates only the schema of the search_path parameter.
	// Before, the refusal said only to set search_path in the URL, which the URL does.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{URL: scanURL(t, "options=-c%20search_path%3Deffectfence_no_such_schema")})
	if err == nil {
		s.Close()
		t.Fatal("a URL whose options name a schema that does not exist: opened")
	}
	if want := `search_path, "effectfence_no_such_schema", names no schema that exists`; !strings.Contains(err.Error(), want) {
		t.Errorf("a URL whose options name a schema that does not exist: %v; want it to say %s", err, want)
	}
}
