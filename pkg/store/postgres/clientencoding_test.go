package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestClientEncodingOfTheRoleDoesNotSplitAnIntent: two processes share a ledger, one as a role
// whose client_encoding is LATIN1 (ALTER ROLE … SET), the other at the server's UTF8. A call
// whose intent is not ASCII, claimed through the first, is in flight for the second, recorded
// under its own name, and its commit replayed to the second's duplicate. Before, the first
// process's text was taken as LATIN1: the intent "café" was recorded as "cafÃ©", the second
// found no record of "café" and admitted it: the call ran twice.
func TestClientEncodingOfTheRoleDoesNotSplitAnIntent(t *testing.T) {
	ctx := context.Background()
	conn := admin(t, "")
	role := newRole(t, "effectfence_test_latin1", "LOGIN")
	r := pgx.Identifier{role}.Sanitize()
	schema := testSchema(t)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+" AUTHORIZATION "+r+
		"; ALTER ROLE "+r+" SET client_encoding = 'LATIN1'"); err != nil {
		t.Fatal(err)
	}
	url := scanURL(t, "search_path="+schema+"&pool_max_conns=2&pool_min_conns=1")
	url = strings.Replace(url, "://postgres@", "://"+role+"@", 1)
	if !strings.Contains(url, role) {
		t.Fatalf("the test URL names no user to replace: %s", Redact(url))
	}
	latin1, err := Open(ctx, Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer latin1.Close()
	a := fence.New(latin1, fence.Config{Owner: "host-a/1/1"})
	b := fence.New(openSchema(t, schema), fence.Config{Owner: "host-b/1/1"})
	req := fence.Request{Intent: "café ☕", Tool: "charge", Args: []byte(`{"usd":1}`)}
	adm, err := a.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("the first claim: %+v %v", adm, err)
	}
	if dup, err := b.Prepare(ctx, req); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("the same call through the other process while the first runs it: %+v %v, want intent_in_flight", dup, err)
	}
	var name string
	if err := conn.QueryRow(ctx, "SELECT intent FROM "+pgx.Identifier{schema}.Sanitize()+".effectfence_records").Scan(&name); err != nil || name != req.Intent {
		t.Fatalf("the ledger's record is named %q (%v), want %q", name, err, req.Intent)
	}
	cert, err := a.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
	if err != nil {
		t.Fatal(err)
	}
	if dup, err := b.Prepare(ctx, req); err != nil || dup.Fresh() || dup.Cert == nil || dup.Cert.Hash != cert.Hash {
		t.Fatalf("the other process's duplicate after the commit: %+v %v, want the replay", dup, err)
	}
}
