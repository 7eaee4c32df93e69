package store_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/postgres"
)

// withHashPassword returns the ledger URL raw with the password "pw#1" in its user
// information, written as people write it (not percent-encoded): pgx reads it as libpq does,
// url.Parse refuses the URL (it reads "#1@…" as a fragment). The test server trusts its
// clients, so the password is never asked for.
func withHashPassword(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.User == nil || u.User.Username() == "" {
		t.Skipf("the test server's URL names no user: %v", err)
	}
	if _, has := u.User.Password(); has {
		t.Skip("the test server's URL holds a password")
	}
	user := u.User.Username()
	return strings.Replace(raw, "://"+user+"@", "://"+user+":pw#1@", 1)
}

// The spool named after a PostgreSQL URL (the spool of a server that does not say where the
// ledger is, and of earlier builds) was one and the same for every URL url.Parse refuses, such
// as one whose password has a '#' or '?': SpoolName gave them all "(unparsable postgres URL)".
// Opening another ledger so written drained the outcomes waiting there into that ledger, which
// refused them as claims it never made, and the files were deleted: a commit answered as kept
// was never recorded in its own ledger.
func TestPostgresSpoolsOfUnparsableURLsAreNotShared(t *testing.T) {
	a := withHashPassword(t, pgtest.Ledger(t, "spoolhasha"))
	b := withHashPassword(t, pgtest.Ledger(t, "spoolhashb"))
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	oldA, err := store.SpoolDir(a)
	if err != nil {
		t.Fatal(err)
	}
	oldB, err := store.SpoolDir(b)
	if err != nil {
		t.Fatal(err)
	}
	if oldA == oldB {
		t.Errorf("two ledgers, one URL-named spool: %s", oldA)
	}
	// The password is no part of the name (nor kept in it): another one reaches the same ledger.
	if other, err := store.SpoolDir(strings.Replace(a, "pw#1", "pw#2", 1)); err != nil || other != oldA {
		t.Errorf("another password: spool %s (%v); want %s", other, err, oldA)
	}
	if n := postgres.SpoolName(a); strings.Contains(n, "pw#1") {
		t.Errorf("SpoolName(%q) = %q keeps the password", a, n)
	}
	l, err := store.Open(ctx, store.Options{Ledger: a})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A's holder keeps its commit in A's URL-named spool (as a process does whose server does
	// not say where the ledger is), and dies.
	spoolDeadCommit(t, a, oldA, "charge:hash", `"ch_hash"`)

	// Ledger B is opened first: it must leave A's outcome alone.
	l, err = store.Open(ctx, store.Options{Ledger: b})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := l.Status(ctx, "charge:hash"); err != nil || s.State != fence.StateNone {
		t.Errorf("ledger B: %+v %v; want no trace of ledger A's intent", s, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l, err = store.Open(ctx, store.Options{Ledger: a})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if s, err := l.Status(ctx, "charge:hash"); err != nil || s.State != fence.StateDone || string(s.Cert.Result) != `"ch_hash"` {
		t.Fatalf("ledger A: %s %v; want its spooled commit recorded (before: none, the re-run-safe claim freed and its effect open to run again)", s.State, err)
	}
}

// A spool named after a URL is the URL's, not one ledger's: the same URL reaches another
// ledger from another environment (PGOPTIONS, PGUSER, PGDATABASE, PGHOST, a service file).
// Opening ledger B with the URL ledger A's holder spooled under drained A's commit into B,
// which refused it as a claim it never made, and the file was deleted: A never recorded it, and
// its re-run-safe claim was freed to run again. Only an outcome of a claim the ledger holds
// (the ticket's intent, token and nonce) is drained from such a spool now; others wait there.
func TestPostgresURLNamedSpoolIsDrainedOnlyIntoItsLedger(t *testing.T) {
	a := pgtest.Ledger(t, "spoolenva")
	b := pgtest.Ledger(t, "spoolenvb")
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	for _, u := range []string{a, b} {
		l, err := store.Open(ctx, store.Options{Ledger: u})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// One URL, the schema from the environment.
	schemaA, plain := withoutSearchPath(t, a)
	schemaB, _ := withoutSearchPath(t, b)
	old, err := store.SpoolDir(plain)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGOPTIONS", "-c search_path="+schemaA)
	spoolDeadCommit(t, plain, old, "charge:env", `"ch_env"`)

	t.Setenv("PGOPTIONS", "-c search_path="+schemaB)
	l, err := store.Open(ctx, store.Options{Ledger: plain})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := l.Status(ctx, "charge:env"); err != nil || s.State != fence.StateNone {
		t.Errorf("ledger B: %s %v; want no trace of ledger A's intent", s.State, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	t.Setenv("PGOPTIONS", "-c search_path="+schemaA)
	l, err = store.Open(ctx, store.Options{Ledger: plain})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if s, err := l.Status(ctx, "charge:env"); err != nil || s.State != fence.StateDone || string(s.Cert.Result) != `"ch_env"` {
		t.Fatalf("ledger A: %s %v; want its spooled commit recorded (before: none, the re-run-safe claim freed and its effect open to run again)", s.State, err)
	}
	if files, err := fence.SpoolFiles(old); err != nil || len(files) != 0 {
		t.Errorf("the URL-named spool still holds %v (%v)", files, err)
	}
}

// withoutSearchPath returns the search_path of the ledger URL raw and raw without it.
func withoutSearchPath(t *testing.T, raw string) (string, string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	sp := q.Get("search_path")
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return sp, u.String()
}
