package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestByteaOutputEscapeIsReadable: a session whose bytea_output is escape (a role's or a
// database's setting kept for old clients; here the URL's), in the query modes that send
// results as text (exec and simple_protocol, which docs/postgres.md names for a pooler in
// transaction mode). A call is admitted and committed, as one statement each and as
// transactions; its duplicate gets the replay, its status reads, the ledger's listing finds
// it, and an aborted call's duplicate is refused prior_failure, its abort in the audit trail. Before, every read of a record failed ("invalid hex format"):
// duplicates were refused store_error rather than replayed, and a commit as a transaction
// (which reads its claim) could not be recorded.
func TestByteaOutputEscapeIsReadable(t *testing.T) {
	ctx := context.Background()
	schema := testSchema(t)
	for _, mode := range []string{"exec", "simple_protocol"} {
		s, err := Open(ctx, Config{URL: scanURL(t, "search_path="+schema+"&default_query_exec_mode="+mode+"&bytea_output=escape&pool_min_conns=1")})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		for _, tx := range []bool{false, true} {
			name := fmt.Sprintf("%s, transactions %v", mode, tx)
			s.noSpeculation.Store(tx)
			s.noFreshSpeculation.Store(tx)
			e := fence.New(keepOpen{s}, fence.Config{})
			if !tx {
				// A first call reads the server's clock: the next fresh claim is one statement.
				if _, err := e.Prepare(ctx, fence.Request{Intent: "warm:" + mode, Tool: "charge"}); err != nil {
					t.Fatalf("%s: warm-up call: %v", name, err)
				}
			}
			r := fence.Request{Intent: fmt.Sprintf("escape:%s:%v", mode, tx), Tool: "charge", Args: []byte(`{"usd":1}`)}
			adm, err := e.Prepare(ctx, r)
			if err != nil || !adm.Fresh() {
				t.Fatalf("%s: claim: %+v %v", name, adm, err)
			}
			cert, err := e.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`))
			if err != nil {
				t.Fatalf("%s: commit: %v", name, err)
			}
			dup, err := e.Prepare(ctx, r)
			if err != nil || dup.Fresh() || dup.Cert == nil || dup.Cert.Hash != cert.Hash || string(dup.Cert.Result) != `{"charge":"ch_1"}` {
				t.Fatalf("%s: duplicate: %+v %v, want the replay of %s", name, dup, err, cert.Hash)
			}
			st, err := e.Status(ctx, r.Intent)
			if err != nil || st.State != fence.StateDone {
				t.Fatalf("%s: status: %+v %v", name, st, err)
			}
			// An abort, whose event the audit trail keeps.
			ab := fence.Request{Intent: r.Intent + ":aborted", Tool: "charge", Args: []byte(`{"usd":2}`)}
			adm, err = e.Prepare(ctx, ab)
			if err != nil || !adm.Fresh() {
				t.Fatalf("%s: claim: %+v %v", name, adm, err)
			}
			if err := e.Abort(ctx, *adm.Ticket, "declined"); err != nil {
				t.Fatalf("%s: abort: %v", name, err)
			}
			if _, err := e.Prepare(ctx, ab); !errors.Is(err, fence.ErrPriorFailure) {
				t.Fatalf("%s: duplicate of the aborted call: %v, want prior_failure", name, err)
			}
			events, listed := 0, 0
			err = s.View(ctx, func(ftx fence.Tx) error {
				if err := ftx.Events(ab.Intent, func(fence.Event) bool { events++; return true }); err != nil {
					return err
				}
				return ftx.Scan(fence.Filter{States: []fence.State{fence.StateDone}}, func(rec *fence.Record) bool {
					if rec.Intent == r.Intent {
						listed++
					}
					return true
				})
			})
			if err != nil || events == 0 || listed != 1 {
				t.Fatalf("%s: audit trail and listing: %d events, listed %d times, %v", name, events, listed, err)
			}
			e.Close()
		}
		s.Close()
	}
}
