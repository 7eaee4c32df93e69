package store_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/postgres"
)

// TestDrainForACallEndsWhileTheServerDoesNotAnswer: a process's PostgreSQL server stops
// answering (netcut holds every byte, on new connections too: a server stopped, a disk that
// hangs) while an outcome waits in its spool, which its background Recover, every 100 ms,
// tries to record. A duplicate of that outcome's intent, refused as unknown, has DrainedFor
// record what waits before it is answered (as wrap and serve do): it must be answered, the
// outcome still waiting, within the bounds of a drain, not held while the server does not
// answer. Before, the background Recover waited on the server holding the spool's lock,
// and DrainedFor waited for that lock, then for the server, its agent's cancellation
// detached: the call hung until the server answered again.
func TestDrainForACallEndsWhileTheServerDoesNotAnswer(t *testing.T) {
	direct := pgtest.Ledger(t, "drainfrozen")
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	p, err := netcut.NewPostgres(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	u.Host = p.Addr()
	l, err := store.Open(ctx, store.Options{Ledger: u.String(), RecoverEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	t.Cleanup(p.Heal) // before the ledger closes
	p.Freeze()
	// Another process of this host, which reaches the server directly, left a commit of
	// intent in the spool and is gone; the background Recover now waits on the server.
	const intent = "charge:frozen-drain"
	spoolDeadCommit(t, direct, l.Config().SpoolDir, intent, `"ch_frozen"`)
	time.Sleep(time.Second)
	type answer struct {
		drained bool
		err     error
	}
	answered := make(chan answer, 1)
	go func() {
		drained, err := l.DrainedFor(ctx, fence.PriorFailureError{Intent: intent, State: fence.StateUnknown})
		answered <- answer{drained, err}
	}()
	const patience = time.Minute // beyond a drain's bounds, far below the server's freeze
	select {
	case a := <-answered:
		if a.drained || a.err == nil {
			t.Fatalf("a drain for a call with the server not answering: drained %v, %v; want the outcome still waiting, and why", a.drained, a.err)
		}
		t.Logf("answered: %v", a.err)
	case <-time.After(patience):
		t.Fatalf("a drain for a call was not answered in %s while the server did not answer", patience)
	}
	p.Heal()
	drained, err := l.DrainedFor(ctx, fence.PriorFailureError{Intent: intent, State: fence.StateUnknown})
	if err != nil || !drained {
		t.Fatalf("a drain for a call once the server answers: drained %v, %v", drained, err)
	}
	if s, err := l.Status(ctx, intent); err != nil || s.State != fence.StateDone || string(s.Cert.Result) != `"ch_frozen"` {
		t.Fatalf("after the drain: %+v %v; want the spooled commit recorded", s, err)
	}
}

// TestRecoverGoesOnWhileASweepWaitsOnAConnection: a background sweep's statement is answered
// by the server while the proxy in front of it holds the answers of every connection open
// then (netcut.FreezeOpen: a proxy in front of a server that failed over keeps its clients'
// old connections, and hands new ones to the new), so the sweep waits for ever. The
// background Recover must go on meanwhile: an outcome another process left in this host's
// spool is recorded through a new connection. Before, the sweep and Recover took turns on one
// goroutine, and the sweep held it: nothing in the spool was recorded by this process until
// it stopped.
func TestRecoverGoesOnWhileASweepWaitsOnAConnection(t *testing.T) {
	direct := pgtest.Ledger(t, "sweepfrozen")
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	p, err := netcut.NewPostgres(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	u.Host = p.Addr()
	l, err := store.Open(ctx, store.Options{Ledger: u.String(), SweepEvery: 100 * time.Millisecond, RecoverEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	t.Cleanup(p.Heal) // before the ledger closes
	// A sweep's DELETE of old events waits for their table, which another session holds in
	// SHARE mode (Recover, with nothing in flight and nothing spooled, writes no event); the
	// proxy then freezes the connections open, the sweep's among them, and the table is let
	// go.
	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	events := pgx.Identifier{schema, "effectfence_events"}.Sanitize()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+events+" IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	for waiting, tries := 0, 0; waiting == 0; tries++ {
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted", events).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if tries == 3000 {
			t.Fatal("no sweep waited for the events' table in a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.FreezeOpen()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	const intent = "charge:swept-frozen"
	spoolDeadCommit(t, direct, l.Config().SpoolDir, intent, `"ch_swept"`)
	// Read by a process of its own, without a spool (it records nothing itself).
	st, err := postgres.Open(ctx, postgres.Config{URL: direct, Existing: true, Brief: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	other := fence.New(st, fence.Config{})
	// Far more than the Recover every 100 ms needs, its pool's frozen connections included.
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := other.Status(ctx, intent)
		if err == nil && s.State == fence.StateDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spooled commit was not recorded by the background Recover in a minute, a sweep waiting on a frozen connection: the intent is %s (%v)", s.State, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
