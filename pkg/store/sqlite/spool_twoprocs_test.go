package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// Two reports of one claim at once through two processes that share one SQLite ledger and its
// spool (a serve agent's fence_commit and fence_release reaching two serve processes) while
// the ledger fails: at most one is answered as kept. Each engine below is one process's: its
// own connections to the file, its own memory; only the file and the spool are shared.
func TestTwoReportsOfOneClaimThroughTwoProcessesAreNotBothKept(t *testing.T) {
	for i := 0; i < 10; i++ {
		path := filepath.Join(t.TempDir(), "ledger.db")
		spoolDir := path + ".spool"
		var downs [2]*fencetest.DownStore
		var engs [2]*fence.Engine
		for j := range engs {
			st, err := sqlite.Open(ctx, path, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			downs[j] = &fencetest.DownStore{Store: st}
			engs[j] = fence.New(downs[j], fence.Config{SpoolDir: spoolDir, LeaseTTL: time.Hour})
			defer engs[j].Close()
		}
		adm, err := engs[0].Prepare(ctx, fence.Request{Intent: "x", Tool: "t", Args: []byte(`{}`)})
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare: %+v %v", adm, err)
		}
		downs[0].Down.Store(true)
		downs[1].Down.Store(true)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, k := range []fence.OutcomeKind{fence.OutcomeCommit, fence.OutcomeRelease} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
				defer cancel()
				_, errs[j] = engs[j].Settle(sctx, fence.Outcome{Kind: k, Ticket: *adm.Ticket, Result: []byte(`1`), Reason: "r"})
			}()
		}
		wg.Wait()
		var sp0, sp1 fence.SpooledError
		if errors.As(errs[0], &sp0) && errors.As(errs[1], &sp1) {
			downs[0].Down.Store(false)
			downs[1].Down.Store(false)
			_, _ = engs[0].DrainSpool(ctx)
			s, _ := engs[0].Status(ctx, "x")
			t.Fatalf("round %d: commit %v; release %v: both answered kept, the intent then %s", i, errs[0], errs[1], s.State)
		}
	}
}
