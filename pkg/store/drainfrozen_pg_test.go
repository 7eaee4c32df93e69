package store_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
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
