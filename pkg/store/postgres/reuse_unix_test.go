//go:build unix

package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgcluster"
)

// TestLostTransactionWhoseIdIsReused: txid_status cannot tell a lost transaction from the one
// that got its id next. A synchronous standby that stopped receiving (the primary's COMMIT
// flushed locally, waiting for it) is promoted after the primary is killed: the transaction
// never reached it, and the new primary gives its id to the next transaction, which commits.
// The store must not read that as its own commit: the counters the lost transaction carried
// are added when the store settles its doubt (before: dropped, "landed"), and resolve calls
// it not committed (before: committed, so a claim sent so would have been admitted with no
// claim in the ledger, and its duplicate admitted too).
func TestLostTransactionWhoseIdIsReused(t *testing.T) {
	t.Parallel()
	primary, standby, s := failoverPair(t)
	ctx := context.Background()
	counters := func() fence.Counters {
		t.Helper()
		var c fence.Counters
		if err := s.View(ctx, func(tx fence.Tx) (err error) { c, err = tx.Counters(); return err }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	add := func(d fence.Counters) error {
		return s.Update(ctx, func(tx fence.Tx) error { return tx.AddCounters(d) })
	}
	if err := add(fence.Counters{Replayed: 1}); err != nil {
		t.Fatal(err)
	}
	before := counters()

	// The standby stops receiving; a transaction's COMMIT waits for it; the primary dies.
	disconnect(t, primary, standby)
	lost := make(chan error, 1)
	go func() { lost <- add(fence.Counters{Replayed: 7}) }()
	waitUntil(t, "a COMMIT to wait for the standby", func() bool {
		return len(primary.Query("postgres", "SELECT pid::text FROM pg_stat_activity WHERE wait_event = 'SyncRep'")) > 0
	})
	primary.Crash()
	err := <-lost
	var cu CommitUnknownError
	if !errors.As(err, &cu) || cu.Xid == 0 || !cu.CountersKept() {
		t.Fatalf("the lost commit answered %v; want CommitUnknownError with its counters kept", err)
	}
	standby.Promote()
	// The new primary's next transactions take the lost one's id, and commit.
	for i := 0; ; i++ {
		got := standby.Query("postgres", "SELECT txid_current()::text")
		var x int64
		fmt.Sscan(got[0], &x)
		if x >= cu.Xid {
			break
		}
		if i > 1000 {
			t.Fatalf("the new primary's ids stay below %d", cu.Xid)
		}
	}
	if got := standby.Query("postgres", "SELECT txid_status($1::bigint)", cu.Xid); got[0] != "committed" {
		t.Skipf("transaction %d reads %v on the new primary, not committed: its id was not reused", cu.Xid, got)
	}
	if err := s.resolve(ctx, cu.Xid, cu.shard, errors.New("lost")); !errors.As(err, new(ConnLostError)) {
		t.Errorf("resolve of the lost transaction %d: %v; want ConnLostError (it did not commit)", cu.Xid, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.doubts.n.Load() > 0 && time.Now().Before(deadline) {
		_ = s.Update(ctx, func(fence.Tx) error { return nil }) // the store settles its doubts first
		time.Sleep(50 * time.Millisecond)
	}
	if n := s.doubts.n.Load(); n != 0 {
		t.Fatalf("%d doubts left after the failover", n)
	}
	if got := counters().Replayed - before.Replayed; got != 7 {
		t.Fatalf("replayed +%d after the failover; want the lost transaction's 7, added once", got)
	}
}

// failoverPair is a primary with a synchronous standby, and a store whose URL names both
// (target_session_attrs=read-write: it goes on against whichever is promoted).
func failoverPair(t *testing.T, settings ...string) (primary, standby *pgcluster.Cluster, s *Store) {
	primary = pgcluster.New(t)
	standby = primary.Standby()
	primary.SetSynchronous(true)
	for _, q := range settings {
		primary.Exec("postgres", q)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&search_path=ledger", primary.Port, standby.Port)
	s, err := Open(context.Background(), Config{URL: url, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return primary, standby, s
}

// disconnect stops the standby receiving: the primary's COMMITs then wait for it.
func disconnect(t *testing.T, primary, standby *pgcluster.Cluster) {
	t.Helper()
	standby.Exec("postgres", "ALTER SYSTEM SET primary_conninfo = ''")
	standby.Exec("postgres", "SELECT pg_reload_conf()")
	waitUntil(t, "the standby to disconnect", func() bool {
		return len(primary.Query("postgres", "SELECT pid::text FROM pg_stat_replication")) == 0
	})
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClaimLostInAFailoverIsNotAdmitted: the same, through the engine, where it decides
// whether a call runs. A claim (as a transaction) waits for the synchronous standby, which
// stopped receiving; the standby is promoted while the old primary still lives (a failover
// manager fences the old primary after), and the new primary's transactions take the claim's
// id; then the old primary dies, the claim's answer with it. Asked on the new primary, that
// id reads committed. Before, the claim was then admitted, though the new primary never had
// it: the call ran, and so did its retry, admitted afresh (the effect twice). Now the claim
// is refused as not recorded, and the retry runs the call once.
func TestClaimLostInAFailoverIsNotAdmitted(t *testing.T) {
	t.Parallel()
	primary, standby, s := failoverPair(t)
	ctx := context.Background()
	s.noFreshSpeculation.Store(true) // the claim as a transaction, whose id resolve asks about
	e := fence.New(keepOpen{s}, fence.Config{LeaseTTL: time.Minute})
	defer e.Close()
	r := fence.Request{Intent: "charge-1", Tool: "charge", Args: []byte(`{"usd":5}`)}

	disconnect(t, primary, standby)
	type result struct {
		adm fence.Admission
		err error
	}
	first := make(chan result, 1)
	go func() { adm, err := e.Prepare(ctx, r); first <- result{adm, err} }()
	var xid []string
	waitUntil(t, "the claim to wait for the standby", func() bool {
		xid = primary.Query("postgres", "SELECT backend_xid::text FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
		return len(xid) > 0
	})
	var n int64
	fmt.Sscan(xid[0], &n)
	standby.Promote()
	for i := 0; ; i++ {
		var x int64
		fmt.Sscan(standby.Query("postgres", "SELECT txid_current()::text")[0], &x)
		if x >= n {
			break
		}
		if i > 1000 {
			t.Fatalf("the new primary's ids stay below %d", n)
		}
	}
	primary.Crash()
	got := <-first
	if got := standby.Query("postgres", "SELECT txid_status($1::bigint)", n); got[0] != "committed" {
		t.Skipf("the claim's transaction %d reads %v on the new primary: its id was not reused", n, got)
	}
	if got.err == nil {
		t.Fatalf("a claim the new primary never had was admitted (%+v): the call runs, and its retry runs it again", got.adm)
	}
	if fence.CodeOf(got.err) != fence.CodeStore {
		t.Fatalf("the lost claim: %v, want a store error", got.err)
	}
	other := fence.New(keepOpen{s}, fence.Config{LeaseTTL: time.Minute})
	defer other.Close()
	adm, err := other.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatalf("the retry: %+v %v; want admitted (the claim was lost, the call never ran)", adm, err)
	}
}
