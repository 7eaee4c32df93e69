package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestServerEndsIdleSessions holds docs/postgres.md's "The next call reconnects" against
// timeouts the server sets for the store's role (ALTER ROLE … SET, as managed services do):
// idle_session_timeout and idle_in_transaction_session_timeout end every pooled connection
// left idle (the server sends FATAL 57P05 and closes), with statement_timeout and lock_timeout
// set too. After each wait until the server has ended every session of the role, a fresh call
// (a one-statement claim, then a transaction), its commit and a duplicate all succeed, each
// admission once, and the duplicate is replayed.
func TestServerEndsIdleSessions(t *testing.T) {
	ctx := context.Background()
	conn := admin(t, "")
	role, url := roleWithSettings(t, "effectfence_test_idle", "pool_max_conns=3&pool_min_conns=2",
		"idle_session_timeout = '300ms'", "idle_in_transaction_session_timeout = '300ms'",
		"statement_timeout = '5s'", "lock_timeout = '2s'")
	s, err := Open(ctx, Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gone := func() {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d sessions of %s still open after a minute idle", n, role)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	e := fence.New(s, fence.Config{Owner: "host-a/1/1"})
	other := fence.New(s, fence.Config{Owner: "host-b/1/1"})
	for i, speculate := range []bool{false, true, true, false} {
		s.noFreshSpeculation.Store(!speculate)
		req := fence.Request{Intent: "idle:" + string(rune('a'+i)), Tool: "charge", Args: []byte(`{"usd":1}`)}
		gone()
		adm, err := e.Prepare(ctx, req)
		if err != nil || !adm.Fresh() {
			t.Fatalf("call %d after every session ended: %+v %v", i, adm, err)
		}
		gone()
		if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
			t.Fatalf("commit %d after every session ended: %v", i, err)
		}
		gone()
		if got, err := other.Prepare(ctx, req); err != nil || got.Fresh() || got.Cert == nil {
			t.Fatalf("duplicate %d after every session ended: %+v %v, want a replay", i, got, err)
		}
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var c fence.Counters
	if err := s.View(ctx, func(tx fence.Tx) error { var err error; c, err = tx.Counters(); return err }); err != nil {
		t.Fatal(err)
	}
	if c.Admitted != 4 || c.Replayed != 4 {
		t.Fatalf("counters %+v: want 4 admitted and 4 replayed", c)
	}
}

// roleWithSettings makes a login role with settings of its own (ALTER ROLE … SET, as managed
// services and DBAs set them) and a schema it owns, and returns the role and a URL that
// connects as it to that schema, with pool (URL parameters) added.
func roleWithSettings(t *testing.T, name, pool string, settings ...string) (role, url string) {
	t.Helper()
	role = newRole(t, name, "LOGIN")
	r := pgx.Identifier{role}.Sanitize()
	schema := testSchema(t)
	sql := "CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize() + " AUTHORIZATION " + r
	for _, set := range settings {
		sql += "; ALTER ROLE " + r + " SET " + set
	}
	if _, err := admin(t, "").Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
	url = strings.Replace(scanURL(t, "search_path="+schema+"&"+pool), "://postgres@", "://"+role+"@", 1)
	if !strings.Contains(url, role) {
		t.Fatalf("the test URL names no user to replace: %s", Redact(url))
	}
	return role, url
}

// roleURL is the test server's URL with role as its user and each key of kv (key, value,
// key, value …) set in its query: pool_min_conns, search_path, application_name.
func roleURL(t *testing.T, role string, kv ...string) *url.URL {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u
}
