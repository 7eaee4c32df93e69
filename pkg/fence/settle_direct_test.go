package fence_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

// A commit answered as kept in the spool (SpooledError: "will be recorded") stands against a
// later Release, Abort, Lost or Commit of the same ticket made directly, not through Settle (a
// caller's clean-up that releases a ticket whose Settle returned an error), as it does against
// a second Settle: a release, abort or lost is refused lease_lost, as after a commit the ledger
// took, a commit of another result gets the spooled commit's cert, and the next attempt
// replays the spooled result. Before, the release freed the intent and the next attempt ran
// the effect a second time; an abort or lost fenced it; a commit recorded its own result; and
// the drain refused the spooled commit as a late result.
func TestDirectReportAfterASpooledCommitIsRefused(t *testing.T) {
	ctx := context.Background()
	leaseLost := func(err error) string {
		if !errors.Is(err, fence.ErrLeaseLost) {
			return "want lease_lost"
		}
		return ""
	}
	report := map[string]func(*fence.Engine, fence.Ticket) (string, error){
		"release": func(e *fence.Engine, tk fence.Ticket) (string, error) {
			err := e.Release(ctx, tk, "cleaning up")
			return leaseLost(err), err
		},
		"abort": func(e *fence.Engine, tk fence.Ticket) (string, error) {
			err := e.Abort(ctx, tk, "cleaning up")
			return leaseLost(err), err
		},
		"lost": func(e *fence.Engine, tk fence.Ticket) (string, error) {
			err := e.Lost(ctx, tk, "cleaning up")
			return leaseLost(err), err
		},
		"commit": func(e *fence.Engine, tk fence.Ticket) (string, error) {
			c, err := e.Commit(ctx, tk, []byte(`"another result"`))
			if err != nil || string(c.Result) != `"charged"` {
				return "want the spooled commit's cert", err
			}
			return "", nil
		},
	}
	for name, rep := range report {
		t.Run(name, func(t *testing.T) {
			ds := &fencetest.DownStore{Store: fence.NewMemoryStore()}
			e := fence.New(ds, fence.Config{SpoolDir: t.TempDir()})
			defer e.Close()
			req := fence.Request{Intent: "x", Tool: "t", Args: []byte(`{}`)}
			adm, err := e.Prepare(ctx, req)
			if err != nil || !adm.Fresh() {
				t.Fatalf("prepare: %+v %v", adm, err)
			}
			ds.Down.Store(true)
			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err = e.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"charged"`)})
			cancel()
			if sp := (fence.SpooledError{}); !errors.As(err, &sp) {
				t.Fatalf("settle with the ledger down: %v; want it spooled", err)
			}
			ds.Down.Store(false)
			if want, err := rep(e, *adm.Ticket); want != "" {
				t.Errorf("%s after the spooled commit: %v; %s", name, err, want)
			}
			if _, err := e.DrainSpool(ctx); err != nil {
				t.Fatalf("drain: %v", err)
			}
			again, err := e.Prepare(ctx, req)
			switch {
			case err != nil:
				t.Errorf("next attempt: %v; want the spooled commit's result", err)
			case again.Fresh():
				t.Errorf("next attempt admitted: the effect runs a second time")
			case string(again.Cert.Result) != `"charged"`:
				t.Errorf("next attempt replays %s; want the spooled commit's result", again.Cert.Result)
			}
		})
	}
}

// TestDirectCommitAfterADrainThatFailedElsewhere: a commit answered as kept in the spool
// stands until the drain records it; once recorded, a Commit of its ticket made directly gets
// the recorded cert, as without the spool. A spool file the drain cannot record (one that is
// not an outcome, left for an operator to read, or another ledger's) makes every drain return
// an error, and that error alone refused the Commit lease_lost, "waits in the spool to be
// recorded", though the spooled commit had just been recorded.
func TestDirectCommitAfterADrainThatFailedElsewhere(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ds, e, adm := spooledCommit(t, dir)
	ds.Down.Store(false)
	if err := os.WriteFile(filepath.Join(dir, "zz-not-an-outcome.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := e.Commit(ctx, *adm.Ticket, []byte(`"another result"`))
	if err != nil || string(c.Result) != `"charged"` {
		t.Fatalf("commit after the spooled commit was recorded: %+v %v; want the spooled commit's cert", c, err)
	}
}

// A report refused lease_lost because another report of its claim waits in the spool (the
// ledger still down, so the waiting one cannot be recorded first) is counted lease_lost, as
// Counters says of every refused Commit, Abort or Release and as the ledger's own refusal of a
// second report is. Before 2026-12-06 it was counted nowhere.
func TestReportRefusedForASpooledOneIsCountedLeaseLost(t *testing.T) {
	ctx := context.Background()
	ds, e, adm := spooledCommit(t, t.TempDir())
	if err := e.Release(ctx, *adm.Ticket, "cleaning up"); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("release after the spooled commit, the ledger still down: %v; want lease_lost", err)
	}
	ds.Down.Store(false)
	st, err := e.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (fence.Counters{Admitted: 1, LeaseLost: 1}); st.SinceBoot != want {
		t.Fatalf("counters %s, want %s", st.SinceBoot.Line(), want.Line())
	}
}

// spooledCommit claims intent x on an engine spooling to dir over a memory ledger, then
// settles its commit ("charged") with the ledger down, so that it waits in the spool; the
// ledger is left down.
func spooledCommit(t *testing.T, dir string) (*fencetest.DownStore, *fence.Engine, fence.Admission) {
	t.Helper()
	ctx := context.Background()
	ds := &fencetest.DownStore{Store: fence.NewMemoryStore()}
	e := fence.New(ds, fence.Config{SpoolDir: dir})
	t.Cleanup(func() { e.Close() })
	adm, err := e.Prepare(ctx, fence.Request{Intent: "x", Tool: "t", Args: []byte(`{}`)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	ds.Down.Store(true)
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = e.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"charged"`)})
	cancel()
	if sp := (fence.SpooledError{}); !errors.As(err, &sp) {
		t.Fatalf("settle with the ledger down: %v; want it spooled", err)
	}
	return ds, e, adm
}
