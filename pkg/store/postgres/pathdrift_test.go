package postgres

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/jackc/pgx/v5"
)

// optionsPathURL is the test URL with the session's search_path set in options, not in the
// search_path parameter: the session resolves the ledger's schema, as it does from a role's
// or a database's search_path ("$user", public by default).
func optionsPathURL(t *testing.T, path string) string {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c search_path="+path)
	q.Set("pool_min_conns", "1")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// TestSchemaMadeAheadOfTheLedgerOnThePathIsRefused: a store whose URL names no schema takes
// the first schema of the session's search_path that exists. When a schema ahead of the
// ledger's on that path is made later (a DBA's CREATE SCHEMA for the role, which "$user"
// reaches), a restart resolved that empty schema and made a new ledger there: the call the
// first process had claimed was admitted again. The open is refused, naming both schemas,
// and creates nothing; the running process keeps its ledger, and a URL naming the schema
// opens. The path is set in options, and for a role ("$user" first) that logs in itself.
func TestSchemaMadeAheadOfTheLedgerOnThePathIsRefused(t *testing.T) {
	t.Parallel()
	t.Run("options", func(t *testing.T) {
		t.Parallel()
		ahead, ledger := testSchema(t), testSchema(t)
		if _, err := admin(t, "").Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{ledger}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		checkSchemaMadeAhead(t, optionsPathURL(t, ahead+","+ledger), ahead, ledger, "")
	})
	t.Run("role", func(t *testing.T) {
		t.Parallel()
		role := newRole(t, "effectfence_test_user", "LOGIN")
		ledger := testSchema(t)
		r, l := pgx.Identifier{role}.Sanitize(), pgx.Identifier{ledger}.Sanitize()
		if _, err := admin(t, "").Exec(context.Background(), "CREATE SCHEMA "+l+" AUTHORIZATION "+r+
			"; ALTER ROLE "+r+` SET search_path = "$user", `+l); err != nil {
			t.Fatal(err)
		}
		checkSchemaMadeAhead(t, roleURL(t, role, "pool_min_conns", "1").String(), role, ledger, "CREATE SCHEMA AUTHORIZATION "+r)
	})
}

// checkSchemaMadeAhead opens raw, which resolves ledger, claims a call, makes the schema
// ahead (by makeAhead, else CREATE SCHEMA ahead), and checks that opening raw again is
// refused.
func checkSchemaMadeAhead(t *testing.T, raw, ahead, ledger, makeAhead string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := admin(t, "")
	a, err := Open(ctx, Config{URL: raw, MaxConns: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Schema() != ledger {
		t.Fatalf("resolved %q, want %q (the first schema of the path that exists)", a.Schema(), ledger)
	}
	req := fence.Request{Intent: "pay:1", Tool: "pay"}
	ea := fence.New(a, fence.Config{})
	if adm, err := ea.Prepare(ctx, req); err != nil || !adm.Fresh() {
		t.Fatalf("first claim: %v", err)
	}
	if makeAhead == "" {
		makeAhead = "CREATE SCHEMA " + pgx.Identifier{ahead}.Sanitize()
	}
	if _, err := conn.Exec(ctx, makeAhead); err != nil {
		t.Fatal(err)
	}
	for _, existing := range []bool{false, true} {
		b, err := Open(ctx, Config{URL: raw, MaxConns: 3, Existing: existing})
		if err == nil {
			adm, perr := fence.New(b, fence.Config{}).Prepare(ctx, req)
			b.Close()
			t.Fatalf("existing=%v: opened on %q (claim fresh: %v, %v); want it refused", existing, b.Schema(), perr == nil && adm.Fresh(), perr)
		}
		for _, want := range []string{`reaches schema "` + ahead + `" first, which holds no ledger`, `"` + ledger + `" after it holds one`, `search_path="` + ledger + `"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("existing=%v: %v; want it to say %s", existing, err, want)
			}
		}
	}
	var made bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass(format('%I.effectfence_version', $1::text)) IS NOT NULL", ahead).Scan(&made); err != nil {
		t.Fatal(err)
	}
	if made {
		t.Errorf("the refused open created tables in %q", ahead)
	}
	if _, err := ea.Prepare(ctx, req); !errors.Is(err, fence.ErrInFlight) {
		t.Errorf("the running process's duplicate: %v, want %v", err, fence.ErrInFlight)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("options")
	q.Set("search_path", ledger)
	u.RawQuery = q.Encode()
	named, err := Open(ctx, Config{URL: u.String(), MaxConns: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	if _, err := fence.New(named, fence.Config{}).Prepare(ctx, req); !errors.Is(err, fence.ErrInFlight) {
		t.Errorf("through a URL naming %q: %v, want %v", ledger, err, fence.ErrInFlight)
	}
}
