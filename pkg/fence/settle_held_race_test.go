package fence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

// heldGateStore is a DownStore whose next Update, once armed, waits for gate after saying so on
// entered: a report stopped on its way to the ledger.
type heldGateStore struct {
	fencetest.DownStore
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (g *heldGateStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.gate
	}
	return g.DownStore.Update(ctx, fn)
}

// TestDirectReportWhileAHeldCommitIsDrained: a commit neither the ledger nor the spool took
// (a full disk) is held in memory and stands against a later report of its ticket. A drain
// took it out of memory before reporting it, so a Release made while the drain's report was
// on its way found nothing waiting, reached the ledger first and freed the intent; the held
// commit was then refused lease_lost and dropped, and the next attempt ran the effect a
// second time.
func TestDirectReportWhileAHeldCommitIsDrained(t *testing.T) {
	ctx := context.Background()
	gs := &heldGateStore{entered: make(chan struct{}), gate: make(chan struct{})}
	gs.Store = fence.NewMemoryStore()
	e := fence.New(gs, fence.Config{SpoolDir: t.TempDir() + "/\x00"}) // no file system takes it
	defer e.Close()
	req := fence.Request{Intent: "x", Tool: "t", Args: []byte(`{}`)}
	adm, err := e.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	gs.Down.Store(true)
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = e.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"charged"`)})
	cancel()
	if err == nil || !strings.Contains(err.Error(), "held in this process's memory") {
		t.Fatalf("settle with the ledger and the spool failing: %v; want it held in memory", err)
	}
	gs.Down.Store(false)
	gs.armed.Store(true)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = e.DrainSpool(ctx) // the spool's directory fails; the held commit is reported
	}()
	<-gs.entered // the drain's report of the held commit is on its way
	rerr := e.Release(ctx, *adm.Ticket, "cleaning up")
	close(gs.gate)
	wg.Wait()
	if !errors.Is(rerr, fence.ErrLeaseLost) {
		t.Errorf("release while the held commit was drained: %v; want lease_lost", rerr)
	}
	again, err := e.Prepare(ctx, req)
	switch {
	case err != nil:
		t.Errorf("next attempt: %v; want the held commit's result", err)
	case again.Fresh():
		t.Errorf("next attempt admitted: the effect runs a second time")
	case string(again.Cert.Result) != `"charged"`:
		t.Errorf("next attempt replays %s; want the held commit's result", again.Cert.Result)
	}
}
