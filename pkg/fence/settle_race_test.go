package fence_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

// Two reports of one claim at once (a serve agent's fence_commit and fence_release sent
// together) while the ledger fails: at most one is answered as kept. Before, both were
// answered SpooledError every time (20 of 20), the second file replacing the first (one per
// ticket), so the commit answered as kept was lost whenever the release won, the intent freed
// and the effect open to run again; with the spool failing too, the same in memory.
func TestTwoReportsOfOneClaimAtOnceAreNotBothKept(t *testing.T) {
	ctx := context.Background()
	for _, spoolFails := range []bool{false, true} {
		for i := 0; i < 10; i++ {
			dir := t.TempDir()
			spool := dir
			if spoolFails {
				spool = dir + "/\x00" // no file system takes it: held in memory
			}
			ds := &fencetest.DownStore{Store: fence.NewMemoryStore()}
			e := fence.New(ds, fence.Config{SpoolDir: spool})
			adm, err := e.Prepare(ctx, fence.Request{Intent: "x", Tool: "t", Args: []byte(`{}`)})
			if err != nil || !adm.Fresh() {
				t.Fatalf("prepare: %+v %v", adm, err)
			}
			ds.Down.Store(true)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for j, k := range []fence.OutcomeKind{fence.OutcomeCommit, fence.OutcomeRelease} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
					defer cancel()
					_, errs[j] = e.Settle(sctx, fence.Outcome{Kind: k, Ticket: *adm.Ticket, Result: []byte(`1`), Reason: "r"})
				}()
			}
			wg.Wait()
			kept := func(err error) bool {
				var sp fence.SpooledError
				return errors.As(err, &sp) || (spoolFails && err != nil && !errors.As(err, new(fence.LeaseLostError)))
			}
			if kept(errs[0]) && kept(errs[1]) {
				ds.Down.Store(false)
				_, _ = e.DrainSpool(ctx)
				s, _ := e.Status(ctx, "x")
				e.Close()
				t.Fatalf("spool failing %v, round %d: commit %v; release %v: both kept, the intent then %s", spoolFails, i, errs[0], errs[1], s.State)
			}
			// The one refused is counted lease_lost, whichever look refused it (before
			// 2026-12-06 a refusal for a report kept before it was counted nowhere).
			refused := uint64(0)
			for _, err := range errs {
				if errors.Is(err, fence.ErrLeaseLost) {
					refused++
				}
			}
			if st, _ := e.Stats(ctx); st.SinceBoot.LeaseLost != refused {
				t.Errorf("spool failing %v, round %d: commit %v; release %v; counted %s, want lease-lost=%d", spoolFails, i, errs[0], errs[1], st.SinceBoot.Line(), refused)
			}
			e.Close()
		}
	}
}
