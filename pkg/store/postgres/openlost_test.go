package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestLostAnswerDuringFirstOpen loses the answer of each round trip of a first Open in turn
// (the schema's creation and migration, one transaction, and the statements around it), with
// the database back at once and away for a while. The Open that lost an answer fails or
// succeeds; either way the next Open finds the ledger whole (every table, the current
// version) and one admission per intent across two processes: a half-made ledger, or one
// that a retried Open made again beside a first that landed, would show here. An Open that
// succeeds knows where the ledger is (SpoolKey), as the next does.
func TestLostAnswerDuringFirstOpen(t *testing.T) {
	t.Parallel()
	p, err := netcut.NewPostgres(pgHost(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	through := u.String()
	open := func(schema string) (*Store, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return Open(ctx, Config{URL: through, Schema: schema, MaxConns: 2, Brief: true})
	}
	// The round trips of a first Open, counted.
	before := p.RoundTrips()
	s, err := open(testSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	n := int(p.RoundTrips() - before)
	s.Close()
	if n < 5 {
		t.Fatalf("a first Open took %d round trips", n)
	}
	t.Logf("a first Open takes %d round trips", n)
	ctx := context.Background()
	look := admin(t, "")
	for k := 1; k <= n; k++ {
		for _, down := range []time.Duration{0, 300 * time.Millisecond} {
			schema := testSchema(t)
			lost := p.Lost()
			p.LoseAnswer(k, down)
			first, ferr := open(schema)
			if first != nil {
				first.Close()
			}
			if p.Lost() == lost {
				p.LoseAnswer(1<<30, 0) // disarm
				t.Fatalf("round trip %d of %d: no answer was lost (Open: %v)", k, n, ferr)
			}
			if ferr != nil && strings.Contains(ferr.Error(), "schema name") {
				t.Fatalf("round trip %d lost (down %v): the first Open blamed the schema's name: %v", k, down, ferr)
			}
			time.Sleep(down)
			again, err := open(schema)
			if err != nil {
				t.Fatalf("round trip %d lost (down %v; the first Open: %v): the next Open: %v", k, down, ferr, err)
			}
			// An Open that succeeded names the ledger's spool as every other process does:
			// one that kept its outcomes elsewhere hid them from the host's other processes,
			// which take a dead holder's re-run-safe claim over unless its outcome waits in
			// their spool.
			if ferr == nil && (first.SpoolKey() != again.SpoolKey() || again.SpoolKey() == "") {
				t.Fatalf("round trip %d lost (down %v): the first Open succeeded with spool key %q, the next has %q", k, down, first.SpoolKey(), again.SpoolKey())
			}
			// The database holds other ledgers (the first Open's, those of other tests): the
			// next Open tells of the ledger made beside them whether the first Open made it
			// (its answer lost, its warning never given) or not. Before, a ledger made by a
			// first Open whose COMMIT answer was lost was found by the next, and nothing was
			// said.
			if len(again.CreatedBeside()) == 0 {
				t.Errorf("round trip %d lost (down %v; the first Open: %v): the next Open found or made a new ledger beside others and does not say so", k, down, ferr)
			}
			var version, tables int
			if err := look.QueryRow(ctx, "SELECT (SELECT version FROM "+quoteIdent(schema)+".effectfence_version), (SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'effectfence%')", schema).Scan(&version, &tables); err != nil {
				t.Fatal(err)
			}
			if version != schemaVersion || tables != 7 {
				t.Fatalf("round trip %d lost (down %v): the ledger is at version %d with %d tables, want %d and 7", k, down, version, tables, schemaVersion)
			}
			other, err := Open(ctx, Config{URL: testURL(t), Schema: schema, MaxConns: 2, Brief: true})
			if err != nil {
				t.Fatal(err)
			}
			oneAdmission(t, "first-open:1", fence.New(again, fence.Config{Owner: "host-a/1/1"}), fence.New(other, fence.Config{Owner: "host-b/1/1"}))
			again.Close()
			other.Close()
			// Used, it is no longer told of.
			used, err := Open(ctx, Config{URL: testURL(t), Schema: schema, MaxConns: 2, Brief: true})
			if err != nil {
				t.Fatal(err)
			}
			if b := used.CreatedBeside(); len(b) != 0 {
				t.Errorf("round trip %d lost (down %v): an Open of the ledger once used still tells of it beside %q", k, down, b)
			}
			used.Close()
			t.Logf("round trip %d lost (down %v): the first Open: %v", k, down, ferr)
		}
	}
}
