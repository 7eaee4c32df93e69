package postgres

import (
	"context"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestBackslashSchemaUnderNonConformingStrings: a session with standard_conforming_strings
// off (the URL's, the role's or the database's setting) reads a backslash in a plain '…'
// literal as an escape. The store writes the ledger's schema into the literals that pin a
// connection's search_path, so a schema named `…_\led` was pinned to `…_led`: another schema,
// here holding another account's ledger, whose receipts the store then read and wrote. Each
// store must claim in its own ledger, and the pin must name the store's schema, whatever the
// session's setting.
func TestBackslashSchemaUnderNonConformingStrings(t *testing.T) {
	ctx := context.Background()
	base := testSchema(t)
	named := func(suffix string) string {
		name := base + suffix
		t.Cleanup(func() {
			if _, err := admin(t, "").Exec(context.Background(), "DROP SCHEMA IF EXISTS "+quoteIdent(name)+" CASCADE"); err != nil {
				t.Errorf("dropping schema %q: %v", name, err)
			}
		})
		return name
	}
	plain := named(`_led`)
	a, err := Open(ctx, Config{URL: scanURL(t, "pool_min_conns=1"), Schema: plain, MaxConns: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ea := fence.New(a, fence.Config{Owner: "host-a/1/1"})
	adm, err := ea.Prepare(ctx, fence.Request{Intent: "pay:1", Tool: "pay"})
	if err != nil || !adm.Fresh() {
		t.Fatalf("claim in %q: %+v %v", plain, adm, err)
	}
	if _, err := ea.Commit(ctx, *adm.Ticket, []byte(`"paid by a"`)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ suffix, how string }{
		{`_\led`, "standard_conforming_strings=off"},
		{`_\led`, "options=-c%20standard_conforming_strings%3Doff"},
		{`_\led'q\'`, "standard_conforming_strings=off"},
	} {
		slashed, how := named(c.suffix), c.how
		b, err := Open(ctx, Config{URL: scanURL(t, "pool_min_conns=1&"+how), Schema: slashed, MaxConns: 3})
		if err != nil {
			t.Fatalf("%s: open %q: %v", how, slashed, err)
		}
		var scs, sp string
		if err := b.pool.QueryRow(ctx, "SELECT current_setting('standard_conforming_strings'), current_setting('search_path')").Scan(&scs, &sp); err != nil {
			b.Close()
			t.Fatal(err)
		}
		if scs != "off" {
			b.Close()
			t.Fatalf("%s: the session's standard_conforming_strings is %q, want off", how, scs)
		}
		if sp != b.pin.set {
			t.Errorf("%s: a connection's search_path is %s, want %s", how, sp, b.pin.set)
		}
		eb := fence.New(b, fence.Config{Owner: "host-b/1/1"})
		got, err := eb.Prepare(ctx, fence.Request{Intent: "pay:1", Tool: "pay"})
		if err != nil || !got.Fresh() {
			b.Close()
			t.Fatalf("%s: the first claim of pay:1 in schema %q: %+v %v (the ledger of %q answered)", how, slashed, got, err, plain)
		}
		if _, err := eb.Commit(ctx, *got.Ticket, []byte(`"paid by b"`)); err != nil {
			b.Close()
			t.Fatal(err)
		}
		b.Close()
		var n int
		if err := admin(t, "").QueryRow(ctx, "SELECT count(*) FROM "+quoteIdent(slashed)+".effectfence_records").Scan(&n); err != nil || n != 1 {
			t.Fatalf("%s: records in %q: %d %v, want 1", how, slashed, n, err)
		}
		if _, err := admin(t, "").Exec(ctx, "TRUNCATE "+quoteIdent(slashed)+".effectfence_records"); err != nil {
			t.Fatal(err)
		}
	}
}
