//go:build unix

package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgcluster"
)

// TestCancelledStandbyWaitIsHeardWhateverClientMinMessages: as
// TestClaimWhoseStandbyWaitIsEndedIsNotAdmittedWithoutIt's cancelled cases, with the
// database's client_min_messages set to error (ALTER DATABASE … SET, to quiet the notices
// and warnings applications do not read). A COMMIT whose wait for the synchronous standby is
// cancelled succeeds, and its WARNING is the store's only sign that the standby lacks the
// claim; at error the server does not send it. Before, the store then took the COMMIT as
// durable and admitted the claim, and after a failover its retry was admitted again: the
// effect twice.
func TestCancelledStandbyWaitIsHeardWhateverClientMinMessages(t *testing.T) {
	for _, oneStatement := range []bool{false, true} {
		t.Run(fmt.Sprintf("one statement %v", oneStatement), func(t *testing.T) {
			ctx := context.Background()
			primary := pgcluster.New(t)
			standby := primary.Standby()
			primary.SetSynchronous(true)
			primary.Exec("postgres", "ALTER DATABASE postgres SET client_min_messages = error")
			url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&search_path=ledger", primary.Port, standby.Port)
			s, err := Open(ctx, Config{URL: url, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			s.noFreshSpeculation.Store(!oneStatement)
			e := fence.New(keepOpen{s}, fence.Config{LeaseTTL: time.Minute})
			defer e.Close()
			if oneStatement {
				// A first call reads the server's clock: the next fresh claim is one statement.
				warm := fence.Request{Intent: "warm", Tool: "charge", Args: []byte(`{"usd":1}`)}
				adm, err := e.Prepare(ctx, warm)
				if err != nil || !adm.Fresh() {
					t.Fatalf("warm-up call: %+v %v", adm, err)
				}
				if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
					t.Fatal(err)
				}
			}
			r := fence.Request{Intent: "charge-1", Tool: "charge", Args: []byte(`{"usd":5}`)}
			disconnect(t, primary, standby)
			type result struct {
				adm fence.Admission
				err error
			}
			first := make(chan result, 1)
			go func() { adm, err := e.Prepare(ctx, r); first <- result{adm, err} }()
			var pid, xid []string
			waitUntil(t, "the claim to wait for the standby", func() bool {
				pid = primary.Query("postgres", "SELECT pid::text FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
				xid = primary.Query("postgres", "SELECT backend_xid::text FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
				return len(pid) > 0 && len(xid) > 0
			})
			primary.Exec("postgres", "SELECT pg_cancel_backend($1::int)", pid[0])
			var got result
			answered := false
			waitUntil(t, "the claim to be answered or to wait for the standby again", func() bool {
				select {
				case got = <-first:
					answered = true
					return true
				default:
				}
				return len(primary.Query("postgres", "SELECT pid::text FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND backend_xid::text <> $1", xid[0])) > 0
			})
			primary.Crash()
			if !answered {
				got = <-first
			}
			standby.Promote()
			if n := standby.Query("postgres", "SELECT count(*)::text FROM ledger.effectfence_records WHERE intent = 'charge-1'"); n[0] != "0" {
				t.Skipf("the promoted standby has the claim (%v): the standby received it after all", n)
			}
			other := fence.New(keepOpen{s}, fence.Config{LeaseTTL: time.Minute})
			defer other.Close()
			retry, err := other.Prepare(ctx, r)
			if got.err == nil && got.adm.Fresh() {
				t.Fatalf("the claim was admitted though the standby lacked it (the retry after the failover: %+v %v)", retry, err)
			}
			if fence.CodeOf(got.err) != fence.CodeStore {
				t.Fatalf("the claim: %+v %v, want a store error", got.adm, got.err)
			}
			if err != nil || !retry.Fresh() {
				t.Fatalf("the retry after the failover: %+v %v; want admitted (the call never ran)", retry, err)
			}
		})
	}
}
