package serve_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// downStore is a memory store whose writes fail, as an unreachable database's do, while down.
type downStore struct {
	fence.Store
	down atomic.Bool
}

func (d *downStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if d.down.Load() {
		return errors.New("connection refused")
	}
	return d.Store.Update(ctx, fn)
}

// spooledCommit starts serve on a ledger that can be taken down, prepares intent and commits
// it with result A while the ledger is down: the commit is answered as kept in the spool. The
// ledger is left down.
func spooledCommit(t *testing.T, intent string) (*downStore, *fence.Engine, *stdioClient, *fence.Ticket) {
	t.Helper()
	st := &downStore{Store: fence.NewMemoryStore()}
	eng := fence.New(st, fence.Config{SpoolDir: t.TempDir()})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	var p serve.PrepareResult
	if toolResult(t, recv(t, c.send(1, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": prepareArgs(intent)}), "prepare", 30*time.Second), &p) || p.Ticket == nil {
		t.Fatalf("prepare: %+v", p)
	}
	st.down.Store(true)
	var r serve.Refusal
	if !toolResult(t, recv(t, c.send(2, "tools/call", map[string]any{"name": serve.ToolCommit, "arguments": map[string]any{"ticket": p.Ticket, "result": "A"}}), "commit A", 30*time.Second), &r) || r.Spooled == "" {
		t.Fatalf("commit A with the ledger down: %+v; want spooled", r)
	}
	return st, eng, c, p.Ticket
}

// docs/serve.md: a commit the ledger cannot take is kept in the spool and "will be recorded as
// done"; a commit retried with the same ticket gets the recorded cert if it carries the same
// result, and a different one is refused result_differs: the first commit stands. Here the
// first commit (A) waits in the spool when a second commit of the same ticket, with result B,
// reaches the ledger, which answers again. Before 2026-12-06 B was recorded and A dropped.
func TestSpooledCommitThenADifferentResult(t *testing.T) {
	st, eng, c, ticket := spooledCommit(t, "charge:spooled")
	st.down.Store(false)
	raw := recv(t, c.send(3, "tools/call", map[string]any{"name": serve.ToolCommit, "arguments": map[string]any{"ticket": ticket, "result": "B"}}), "commit B", 30*time.Second)
	if _, err := eng.DrainSpool(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec, err := eng.Status(context.Background(), "charge:spooled")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Cert == nil || string(rec.Cert.Result) != `"A"` || !strings.Contains(string(raw), serve.CodeResultDiffers) {
		t.Errorf("the commit kept in the spool (A) was told it would be recorded; the ledger has %+v, and commit B was answered %s", rec.Cert, raw)
	}
}

// The same with a fence_release after the spooled commit (an agent whose error handling
// releases the ticket when a call fails, say). Without the spool a release after a commit is
// refused lease_lost. Before 2026-12-06, with the ledger down for both calls, the release's
// spool file (named by intent and token) replaced the commit's; with the ledger back for the
// release, the release landed first and the spooled commit found nothing to hold. Either way
// the intent was free again and the next fence_prepare was told fresh: a second execution.
func TestSpooledCommitThenARelease(t *testing.T) {
	for _, downForRelease := range []bool{true, false} {
		name := "ledger back for the release"
		if downForRelease {
			name = "ledger down for both"
		}
		t.Run(name, func(t *testing.T) {
			st, eng, c, ticket := spooledCommit(t, "charge:spooled-release")
			st.down.Store(downForRelease)
			raw := recv(t, c.send(3, "tools/call", map[string]any{"name": serve.ToolRelease, "arguments": map[string]any{"ticket": ticket, "reason": "the call failed"}}), "release", 30*time.Second)
			st.down.Store(false)
			if _, err := eng.DrainSpool(context.Background()); err != nil {
				t.Fatal(err)
			}
			var again serve.PrepareResult
			raw2 := recv(t, c.send(4, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": prepareArgs("charge:spooled-release")}), "the duplicate", 30*time.Second)
			if !toolResult(t, raw2, &again) && again.Status == serve.StatusFresh {
				t.Errorf("the duplicate of an intent whose commit was spooled was told fresh (a second execution); the release was answered %s", raw)
			}
		})
	}
}
