package postgres

import (
	"context"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestPathChangedUnderARunningStoreKeepsItsLedger: a store whose URL names no schema
// resolves its ledger from the session's search_path when it opens (the role's, here). Open
// refuses a path that reaches another ledger first, but a running store met such a path
// later: a schema holding a ledger put ahead of its own on the role's path (ALTER ROLE …
// SET search_path, reaching its new connections once the pool's were ended) or named like
// the role while "$user" leads that path (reaching even its open connections at once).
// Its unqualified names then read and wrote the other ledger: the committed call looked
// absent and was admitted again. Every connection keeps the schema the store resolved.
func TestPathChangedUnderARunningStoreKeepsItsLedger(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		path func(role, ledger, other string) string // the role's path when the store opens
		move func(role, ledger, other string) string // what an operator runs meanwhile
		// other: the schema that gets a ledger ahead (empty: the role's own, for "$user")
		byRole bool
		end    bool // end the store's connections after the move
	}{
		{
			name: "alter role",
			path: func(_, ledger, _ string) string { return ledger },
			move: func(role, ledger, other string) string {
				return "ALTER ROLE " + role + " SET search_path = " + other + ", " + ledger
			},
			end: true,
		},
		{
			name:   "$user made",
			path:   func(_, ledger, _ string) string { return `"$user", ` + ledger },
			byRole: true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			conn := admin(t, "")
			roleName := newRole(t, "effectfence_test_run", "LOGIN")
			ledgerName := testSchema(t)
			otherName := testSchema(t)
			if c.byRole {
				otherName = roleName
			}
			role, ledger, other := pgx.Identifier{roleName}.Sanitize(), pgx.Identifier{ledgerName}.Sanitize(), pgx.Identifier{otherName}.Sanitize()
			if _, err := conn.Exec(ctx, "CREATE SCHEMA "+ledger+" AUTHORIZATION "+role+
				"; ALTER ROLE "+role+" SET search_path = "+c.path(role, ledger, other)); err != nil {
				t.Fatal(err)
			}
			u := roleURL(t, roleName, "pool_min_conns", "1", "application_name", "run-"+ledgerName)
			s, err := Open(ctx, Config{URL: u.String(), MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Schema() != ledgerName {
				t.Fatalf("resolved %q, want %q", s.Schema(), ledgerName)
			}
			e := fence.New(s, fence.Config{})
			req := fence.Request{Intent: "pay:1", Tool: "pay"}
			adm, err := e.Prepare(ctx, req)
			if err != nil || !adm.Fresh() {
				t.Fatalf("first claim: %v %v", adm, err)
			}
			if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"paid"`)); err != nil {
				t.Fatal(err)
			}
			// The other ledger, made by the role itself (its tables are the role's to use).
			if _, err := conn.Exec(ctx, "CREATE SCHEMA "+other+" AUTHORIZATION "+role); err != nil {
				t.Fatal(err)
			}
			ou := *u
			oq := ou.Query()
			oq.Set("search_path", otherName)
			oq.Set("application_name", "other-"+ledgerName)
			ou.RawQuery = oq.Encode()
			o, err := Open(ctx, Config{URL: ou.String(), MaxConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			o.Close()
			if c.move != nil {
				if _, err := conn.Exec(ctx, c.move(role, ledger, other)); err != nil {
					t.Fatal(err)
				}
			}
			if c.end {
				var n int
				if err := conn.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", "run-"+ledgerName).Scan(&n); err != nil || n == 0 {
					t.Fatalf("ended %d of the store's connections: %v", n, err)
				}
			}
			// A few tries: the first may meet a connection the server ended.
			var dup fence.Admission
			for try := 0; ; try++ {
				dup, err = e.Prepare(ctx, req)
				if err == nil || try == 3 {
					break
				}
				t.Logf("duplicate, try %d: %v", try, err)
			}
			if err != nil {
				t.Fatalf("duplicate: %v", err)
			}
			if dup.Fresh() {
				t.Fatalf("the committed call was admitted again: the store read the ledger in %s", other)
			}
			if dup.Cert == nil || string(dup.Cert.Result) != `"paid"` {
				t.Fatalf("duplicate: %+v, want the replay of \"paid\"", dup)
			}
		})
	}
}

// TestPinnedPathLeavesASessionAtTheSchemaAlone: the pin (pathPin) narrows a session's path
// that names more than the ledger's schema to that schema (and pg_catalog after it, where the
// session named it there), and leaves one that names it alone as it is, written bare or
// quoted, on a connection opened before Open resolved the schema and on one opened after:
// behind a pooler in transaction mode a session's setting stays on the server connection for
// the pooler's other clients, and the path the pooler section of docs/postgres.md asks the
// role to have is the schema alone.
func TestPinnedPathLeavesASessionAtTheSchemaAlone(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	for _, c := range []struct{ path, want string }{
		{schema, schema},
		{`"` + schema + `"`, `"` + schema + `"`},
		{schema + ", public", `"` + schema + `"`},
		// pg_catalog named after the schema keeps its place: the schema's functions come
		// before the built-in ones (the clock tests of cmd/effectfence shift the ledger's
		// clock so; the pin lost it at first).
		{schema + ",pg_catalog,public", `"` + schema + `", pg_catalog`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		u, err := url.Parse(testURL(t))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("search_path", c.path)
		q.Set("pool_min_conns", "1")
		u.RawQuery = q.Encode()
		s, err := Open(ctx, Config{URL: u.String(), MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		// The connection Open used (pinned at its first use after), then one opened since
		// (pinned as it is set up).
		for _, conn := range []string{"Open's connection", "a new connection"} {
			if conn == "a new connection" {
				s.pool.Reset()
			}
			var got string
			if err := s.pool.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("search_path=%s: the path of %s is %s, want %s", c.path, conn, got, c.want)
			}
		}
		s.Close()
	}
}

// TestTransactionPoolerPathChangedKeepsItsLedger: through PgBouncer in transaction mode the
// store's sessions are the pooler's server connections, which take the role's search_path
// when the pooler opens them. The role's path is changed to put another ledger ahead while
// the store runs, and the pooler reconnects (as at server_lifetime or a failover): a
// duplicate of a committed call is still replayed, not admitted again. Both query modes
// PgBouncer 1.18 supports in transaction mode.
func TestTransactionPoolerPathChangedKeepsItsLedger(t *testing.T) {
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			role, schema := poolerRole(t, true)
			port := startPgBouncer(t, role)
			s := openPooled(t, poolerURL(t, role, port, map[string]string{"default_query_exec_mode": mode}))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			e := fence.New(s, fence.Config{})
			req := fence.Request{Intent: "pay:1", Tool: "pay"}
			adm, err := e.Prepare(ctx, req)
			if err != nil || !adm.Fresh() {
				t.Fatal(adm, err)
			}
			if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"paid"`)); err != nil {
				t.Fatal(err)
			}
			// Another ledger, the role's own, opened directly (not through the pooler).
			other := role + "_o"
			conn := admin(t, "")
			r, o, l := pgx.Identifier{role}.Sanitize(), pgx.Identifier{other}.Sanitize(), pgx.Identifier{schema}.Sanitize()
			if _, err := conn.Exec(ctx, "CREATE SCHEMA "+o+" AUTHORIZATION "+r); err != nil {
				t.Fatal(err)
			}
			os, err := Open(ctx, Config{URL: roleURL(t, role, "search_path", other, "pool_min_conns", "1").String(), MaxConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			os.Close()
			if _, err := conn.Exec(ctx, "ALTER ROLE "+r+" SET search_path = "+o+", "+l); err != nil {
				t.Fatal(err)
			}
			reconnectPooler(t, port)
			for i := range 3 {
				dup, err := e.Prepare(ctx, req)
				if err != nil || dup.Fresh() || dup.Cert == nil || string(dup.Cert.Result) != `"paid"` {
					t.Fatalf("duplicate %d: fresh %v, %+v, %v; want the replay of \"paid\"", i, dup.Fresh(), dup.Cert, err)
				}
			}
		})
	}
}

// TestANewConnectionIsPinnedInItsSetUp: a connection the pool opens once the store knows its
// schema is pinned (pathPin) by the statement every new connection runs anyway, not in round
// trips of its own at its first use: its start (which ends with one round trip's answer), that
// statement, then the caller's. Pinned at first use, it took two more (the pin's statement
// prepared, then run), each one more place for a cut network to end the call. Its path is
// the schema's all the same, the session's path (the URL's here) naming more than it.
func TestANewConnectionIsPinnedInItsSetUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := testSchema(t)
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema+", public")
	u.RawQuery = q.Encode()
	var trips atomic.Int64
	s, err := Open(ctx, Config{URL: u.String(), MaxConns: 1, Brief: true, wrapConn: func(c net.Conn) net.Conn {
		return &tripConn{Conn: c, trips: &trips}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.pool.Reset() // the connection Open used goes; the next is opened with the schema known
	before := trips.Load()
	if _, err := s.pool.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if n := trips.Load() - before; n != 3 {
		t.Errorf("a new connection's start and first statement took %d round trips, want 3 (its start, its set-up, the statement)", n)
	}
	var got string
	if err := s.pool.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := `"` + schema + `"`; got != want {
		t.Errorf("the new connection's path is %s, want %s", got, want)
	}
}

// BenchmarkNewConnection: a pooled connection opened, set up and pinned (its path, the URL's,
// naming more than the ledger's schema), and its first statement run: what a call that finds
// no idle connection (a pool growing under load, or refilled after a cut) waits for before its
// own statements. TestANewConnectionIsPinnedInItsSetUp counts its round trips.
func BenchmarkNewConnection(b *testing.B) {
	ctx := context.Background()
	schema := testSchema(b)
	u, err := url.Parse(testURL(b))
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema+", public")
	u.RawQuery = q.Encode()
	s, err := Open(ctx, Config{URL: u.String(), MaxConns: 1, Brief: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.pool.Reset()
		if _, err := s.pool.Exec(ctx, "SELECT 1"); err != nil {
			b.Fatal(err)
		}
	}
}
