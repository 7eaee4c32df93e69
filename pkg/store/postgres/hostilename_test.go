package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
)

// hostileSchema returns a unique schema name made of testSchema's name and suffix, dropped
// when the test ends (by its exact name, quoted).
func hostileSchema(t *testing.T, suffix string) string {
	t.Helper()
	name := testSchema(t) + suffix
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin(t, "").Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %q: %v", name, err)
		}
	})
	return name
}

// quoteIdent spells name as a quoted SQL identifier, as an operator writes it in search_path.
func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// oneAdmission races 16 first attempts of intent across the engines and fails unless exactly
// one is admitted.
func oneAdmission(t *testing.T, intent string, engines ...*fence.Engine) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			adm, err := engines[i%len(engines)].Prepare(context.Background(), fence.Request{Intent: intent, Tool: "pay"})
			switch {
			case err == nil && adm.Fresh():
				mu.Lock()
				admitted++
				mu.Unlock()
			case err != nil && !errors.Is(err, fence.ErrInFlight):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if admitted != 1 {
		t.Fatalf("intent %q admitted %d times, want 1", intent, admitted)
	}
}

// TestHostileSchemaNames holds docs/postgres.md's "quoted (\"Effectfence\") it is kept as
// written" for names that SQL must quote: a quote, a semicolon and a comment, a comma, spaces,
// a dollar, a backslash, an apostrophe and non-ASCII letters. Named in Config.Schema and as a
// quoted first element of the URL's search_path, both reach one ledger with one lock per
// intent; a claim, its commit and a replay work; a waiter is woken across the two stores (the
// NOTIFY channel); a corrupt record's advice is a DELETE that runs as given; and the ledger
// commands' open (Existing) finds the ledger. Nothing of the name reaches SQL unquoted.
func TestHostileSchemaNames(t *testing.T) {
	ctx := context.Background()
	for i, suffix := range []string{
		`_Q"x";DROP TABLE t;--`,
		`_a,b, public`,
		`_sp ace $1 \n 'it''s'`,
		`_Ünïcødé_日本`,
	} {
		name := hostileSchema(t, suffix)
		a, err := Open(ctx, Config{URL: scanURL(t, "pool_min_conns=1"), Schema: name, MaxConns: 3})
		if err != nil {
			t.Fatalf("open with Config.Schema %q: %v", name, err)
		}
		defer a.Close()
		if len(name) > 63 {
			t.Fatalf("schema name %q is %d bytes, which PostgreSQL cuts (TestLongSchemaNamesAreRefused)", name, len(name))
		}
		b, err := openPath(t, quoteIdent(name)+", public")
		if err != nil {
			t.Fatalf("open with search_path %s: %v", quoteIdent(name), err)
		}
		if a.Schema() != name || b.Schema() != name {
			t.Fatalf("resolved %q and %q, want %q", a.Schema(), b.Schema(), name)
		}
		var n int
		if err := admin(t, "").QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'effectfence%'", name).Scan(&n); err != nil || n != 7 {
			t.Fatalf("ledger tables in schema %q: %d %v, want 7", name, n, err)
		}
		ea, eb := fence.New(a, fence.Config{Owner: "host-a/1/1"}), fence.New(b, fence.Config{Owner: "host-b/1/1"})
		intent := "hostile:" + string(rune('a'+i))
		oneAdmission(t, intent, ea, eb)

		// A waiter on one store is woken by the other's outcome.
		r := fence.Request{Intent: intent + ":watch", Tool: "pay"}
		adm, err := ea.Prepare(ctx, r)
		if err != nil || adm.Ticket == nil {
			t.Fatalf("claim: %+v %v", adm, err)
		}
		ch, stop, err := b.Watch(ctx, r.Intent)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ea.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("schema %q: the waiter was not woken within 20 s", name)
		}
		stop()
		if got, err := eb.Prepare(ctx, r); err != nil || got.Fresh() || got.Cert == nil {
			t.Fatalf("replay across stores: %+v %v", got, err)
		}

		// A corrupt record's advice runs as given and removes exactly that row.
		if _, err := a.pool.Exec(ctx, "INSERT INTO effectfence_records (intent, state, body) VALUES ($1, 'done', '\\x7b7b'::bytea)", "bad'one"); err != nil {
			t.Fatal(err)
		}
		_, err = ea.Prepare(ctx, fence.Request{Intent: "bad'one", Tool: "t"})
		_, sql, ok := strings.Cut(errText(err), "remove the row: ")
		if !ok {
			t.Fatalf("corrupt record: %v", err)
		}
		if _, err := admin(t, "").Exec(ctx, sql); err != nil {
			t.Fatalf("running the advice %q: %v", sql, err)
		}
		if adm, err := eb.Prepare(ctx, fence.Request{Intent: "bad'one", Tool: "t"}); err != nil || !adm.Fresh() {
			t.Fatalf("after the advice: %+v %v", adm, err)
		}

		c, err := Open(ctx, Config{URL: scanURL(t, "pool_min_conns=1"), Schema: name, MaxConns: 2, Existing: true, Brief: true})
		if err != nil {
			t.Fatalf("Existing open of schema %q: %v", name, err)
		}
		c.Close()
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestLongSchemaNamesAreRefused: PostgreSQL cuts an identifier to 63 bytes (NAMEDATALEN - 1),
// so every schema name that starts with the same 63 bytes reaches one schema. Two accounts'
// ledgers named apart only after that (…_account_1 and …_account_2 past byte 63) were one
// ledger: a call of the second was answered with the first's receipt and never ran. A name
// longer than PostgreSQL keeps is refused, in Config.Schema and in the URL's search_path
// (unquoted and quoted), naming the schema it would reach, and nothing is created; the name
// as PostgreSQL keeps it opens that schema.
func TestLongSchemaNamesAreRefused(t *testing.T) {
	ctx := context.Background()
	base := testSchema(t)
	stem := base + strings.Repeat("x", 63-len(base))
	one, two := stem+"_account_1", stem+"_account_2"
	t.Cleanup(func() {
		_, _ = admin(t, "").Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{stem}.Sanitize()+" CASCADE")
	})
	open := func(how, name string) (*Store, error) {
		switch how {
		case "config":
			s, err := Open(ctx, Config{URL: scanURL(t, "pool_min_conns=1"), Schema: name, MaxConns: 3})
			if err == nil {
				t.Cleanup(func() { s.Close() })
			}
			return s, err
		case "quoted":
			return openPath(t, quoteIdent(name))
		}
		return openPath(t, name)
	}
	for _, how := range []string{"config", "search_path", "quoted"} {
		a, err := open(how, one)
		if err == nil {
			ea := fence.New(a, fence.Config{Owner: "host-a/1/1"})
			adm, perr := ea.Prepare(ctx, fence.Request{Intent: "pay:" + how, Tool: "pay"})
			if perr == nil && adm.Ticket != nil {
				_, perr = ea.Commit(ctx, *adm.Ticket, []byte(`"paid for account 1"`))
			}
			if perr != nil {
				t.Fatal(perr)
			}
			if b, err := open(how, two); err == nil {
				got, err := fence.New(b, fence.Config{Owner: "host-b/1/1"}).Prepare(ctx, fence.Request{Intent: "pay:" + how, Tool: "pay"})
				t.Fatalf("%s: %q and %q both opened, schemas %q and %q; the first claim of pay:%s in the second: fresh %v, %v",
					how, one, two, a.Schema(), b.Schema(), how, got.Fresh(), err)
			}
			t.Fatalf("%s: the schema name %q of %d bytes opened (schema %q)", how, one, len(one), a.Schema())
		}
		if !strings.Contains(err.Error(), "longer than PostgreSQL keeps of a name (63)") || !strings.Contains(err.Error(), quoteIdent(stem)) {
			t.Fatalf("%s: the refusal of %q does not say so or name %s: %v", how, one, quoteIdent(stem), err)
		}
		var n int
		if err := admin(t, "").QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", stem).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%s: schema %q after the refusal: %d %v, want none", how, stem, n, err)
		}
	}
	// A name the server cannot hold at all is refused as such.
	for _, bad := range []string{stem[:20] + "\x00nul", stem[:20] + "\xff"} {
		_, err := Open(ctx, Config{URL: scanURL(t, "pool_min_conns=1"), Schema: bad, MaxConns: 2})
		if err == nil || !strings.Contains(err.Error(), "not one PostgreSQL can hold") {
			t.Fatalf("the schema name %q: %v", bad, err)
		}
	}
	s, err := openPath(t, stem)
	if err != nil {
		t.Fatalf("the name as PostgreSQL keeps it (%d bytes): %v", len(stem), err)
	}
	if s.Schema() != stem {
		t.Fatalf("resolved %q, want %q", s.Schema(), stem)
	}
}
