package postgres

import (
	"context"
	"errors"

	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestSessionChangedUnderARunningStoreIsExplained: what an operator or a failover tool changes
// under a running store (the role's sessions made read-only, a privilege revoked, the schema
// renamed or dropped) refuses its writes with the server's text alone ("cannot execute
// nextval() in a read-only transaction", "relation \"effectfence_records\" does not exist"),
// which named neither the cause nor that nothing was recorded. Each refusal names its cause
// and says so; a claim sent meanwhile is not admitted and left no record, and the outcome of
// a call claimed before is recorded once the change is undone.
func TestSessionChangedUnderARunningStoreIsExplained(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		change     string // %r the role, %s the schema, %n the schema's other name
		undo       string
		end        bool // end the store's connections after the change (a role's setting)
		want       string
		isReadOnly bool
	}{
		{
			name: "read-only", change: "ALTER ROLE %r SET default_transaction_read_only = on", undo: "ALTER ROLE %r RESET default_transaction_read_only",
			end: true, want: "the session turned read-only while this process ran", isReadOnly: true,
		},
		{
			name: "revoke", change: "REVOKE ALL ON ALL TABLES IN SCHEMA %s FROM %r", undo: "GRANT ALL ON ALL TABLES IN SCHEMA %s TO %r",
			want: "may no longer use the ledger in schema",
		},
		{
			name: "rename", change: "ALTER SCHEMA %s RENAME TO %n", undo: "ALTER SCHEMA %n RENAME TO %s",
			want: "the ledger's tables are gone from schema",
		},
		{
			name: "drop", change: "DROP SCHEMA %s CASCADE",
			want: "the ledger's tables are gone from schema",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			conn := admin(t, "")
			roleName := newRole(t, "effectfence_test_mid", "LOGIN")
			schema, renamed := testSchema(t), testSchema(t)
			sql := strings.NewReplacer("%r", pgx.Identifier{roleName}.Sanitize(), "%s", pgx.Identifier{schema}.Sanitize(), "%n", pgx.Identifier{renamed}.Sanitize())
			if _, err := conn.Exec(ctx, sql.Replace("CREATE SCHEMA %s AUTHORIZATION %r")); err != nil {
				t.Fatal(err)
			}
			u := roleURL(t, roleName, "pool_min_conns", "1", "search_path", schema, "application_name", "mid-"+schema)
			s, err := Open(ctx, Config{URL: u.String(), MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			e := fence.New(s, fence.Config{})
			held, err := e.Prepare(ctx, fence.Request{Intent: "held", Tool: "pay"})
			if err != nil || !held.Fresh() {
				t.Fatalf("claim: %v %v", held, err)
			}
			end := func() {
				if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", "mid-"+schema); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := conn.Exec(ctx, sql.Replace(c.change)); err != nil {
				t.Fatal(err)
			}
			if c.end {
				end()
			}
			check := func(what string, err error) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nothing of this transaction was recorded") {
					t.Errorf("%s: %v; want it to say %q and that nothing was recorded", what, err, c.want)
				}
				if c.isReadOnly && !errors.Is(err, ErrReadOnly) {
					t.Errorf("%s: %v; want %v", what, err, ErrReadOnly)
				}
			}
			// The first try may meet a connection the server ended.
			var adm fence.Admission
			for try := 0; try < 3; try++ {
				if adm, err = e.Prepare(ctx, fence.Request{Intent: "meanwhile", Tool: "pay"}); err == nil || !strings.Contains(err.Error(), "connection") {
					break
				}
			}
			if adm.Fresh() {
				t.Fatal("a claim was admitted while the ledger refused writes")
			}
			check("a claim", err)
			_, err = e.Commit(ctx, *held.Ticket, []byte(`"paid"`))
			check("a commit", err)
			if c.undo == "" {
				return
			}
			if _, err := conn.Exec(ctx, sql.Replace(c.undo)); err != nil {
				t.Fatal(err)
			}
			if c.end {
				end()
			}
			var cert *fence.Cert
			for try := 0; try < 3; try++ {
				if cert, err = e.Commit(ctx, *held.Ticket, []byte(`"paid"`)); err == nil {
					break
				}
			}
			if err != nil || cert == nil {
				t.Fatalf("the commit once undone: %v", err)
			}
			if adm, err := e.Prepare(ctx, fence.Request{Intent: "meanwhile", Tool: "pay"}); err != nil || !adm.Fresh() {
				t.Fatalf("the claim refused before, once undone: %+v %v (it must have left no record)", adm, err)
			}
			if adm, err := e.Prepare(ctx, fence.Request{Intent: "held", Tool: "pay"}); err != nil || adm.Cert == nil || string(adm.Cert.Result) != `"paid"` {
				t.Fatalf("a duplicate of the committed call: %+v %v", adm, err)
			}
		})
	}
}

// TestRefusalOfACommitInDoubtIsNotSaidUnrecorded: a COMMIT whose answer was lost, and that the
// server could not be asked about because the question itself was refused (the role's
// statement_timeout ended it, or the ledger was renamed meanwhile), may have landed. The
// store's explanations of such refusals say that nothing of the transaction was recorded:
// they must not be given to that CommitUnknownError, whose own text says the outcome is
// unknown. Until 2026-12-07 the statement_timeout's and the lock_timeout's were.
func TestRefusalOfACommitInDoubtIsNotSaidUnrecorded(t *testing.T) {
	s := &Store{schema: "ledger"}
	for _, code := range []string{"57014", "55P03", "25006", "42501", "42P01", "3F000"} {
		pe := &pgconn.PgError{Code: code, Message: "canceling statement due to statement timeout"}
		got := s.explained(context.Background(), CommitUnknownError{Xid: 7, Err: pe})
		if strings.Contains(got.Error(), "nothing of this transaction was recorded") {
			t.Errorf("%s: %v; a commit in doubt may have been recorded", code, got)
		}
		if got := s.explained(context.Background(), pe); !strings.Contains(got.Error(), "nothing of this transaction was recorded") {
			t.Errorf("%s before COMMIT: %v; want it explained", code, got)
		}
	}
	// A connect refused (FATAL: permission denied for database, CONNECT revoked) is not a
	// privilege on the ledger's tables: its own text names it.
	connect := &pgconn.PgError{Severity: "FATAL", Code: "42501", Message: `permission denied for database "test"`}
	if got := s.explained(context.Background(), connect); got != error(connect) {
		t.Errorf("a refused connect: %v; want the server's text", got)
	}
}
