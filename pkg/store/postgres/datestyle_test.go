package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestDateStyleOfTheSessionIsReadable: a session whose DateStyle writes dates otherwise than
// ISO (German, SQL, Postgres: a role's or a database's setting of a locale; here the URL's),
// in the query modes that send results as text (exec and simple_protocol, which
// docs/postgres.md names for a pooler in transaction mode). A call is admitted and committed,
// as one statement each and as transactions, its duplicate gets the replay and its status
// reads with its lease. Before, every read of the server's clock failed ("invalid PostgreSQL
// date/time value"): no call was admitted.
func TestDateStyleOfTheSessionIsReadable(t *testing.T) {
	ctx := context.Background()
	schema := testSchema(t)
	for _, style := range []string{"German", "SQL,DMY", "Postgres,MDY"} {
		for _, mode := range []string{"exec", "simple_protocol"} {
			s, err := Open(ctx, Config{URL: scanURL(t, "search_path="+schema+"&default_query_exec_mode="+mode+"&DateStyle="+style+"&pool_min_conns=1")})
			if err != nil {
				t.Fatalf("%s, %s: %v", style, mode, err)
			}
			for _, tx := range []bool{false, true} {
				name := fmt.Sprintf("%s, %s, transactions %v", style, mode, tx)
				s.noSpeculation.Store(tx)
				s.noFreshSpeculation.Store(tx)
				e := fence.New(keepOpen{s}, fence.Config{})
				r := fence.Request{Intent: fmt.Sprintf("style:%s:%s:%v", style, mode, tx), Tool: "charge", Args: []byte(`{"usd":1}`)}
				if !tx {
					// A first call reads the server's clock: the next fresh claim is one statement.
					if _, err := e.Prepare(ctx, fence.Request{Intent: r.Intent + ":warm", Tool: "charge"}); err != nil {
						t.Fatalf("%s: warm-up call: %v", name, err)
					}
				}
				adm, err := e.Prepare(ctx, r)
				if err != nil || !adm.Fresh() {
					t.Fatalf("%s: claim: %+v %v", name, adm, err)
				}
				st, err := e.Status(ctx, r.Intent)
				if err != nil || st.State != fence.StateInFlight || !st.LeaseUntil.Equal(adm.Ticket.LeaseUntil) {
					t.Fatalf("%s: status of the claim: %+v %v, want in flight until %s", name, st, err, adm.Ticket.LeaseUntil)
				}
				cert, err := e.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`))
				if err != nil {
					t.Fatalf("%s: commit: %v", name, err)
				}
				dup, err := e.Prepare(ctx, r)
				if err != nil || dup.Fresh() || dup.Cert == nil || dup.Cert.Hash != cert.Hash {
					t.Fatalf("%s: duplicate: %+v %v, want the replay of %s", name, dup, err, cert.Hash)
				}
				e.Close()
			}
			s.Close()
		}
	}
}
