package wrap

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// unreachable is a store whose transactions fail while down is set, as a ledger that does not
// answer (its lock held elsewhere, its server away).
type unreachable struct {
	fence.Store
	down atomic.Bool
}

func (u *unreachable) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if u.down.Load() {
		return errors.New("the ledger does not answer")
	}
	return u.Store.Update(ctx, fn)
}

// TestHoldIsRecordedByALaterRenewal: a task's claim is renewed naming its server's group as
// held (beats.hold) when its handle is out; a ledger that does not take that renewal leaves it
// to the renewals after it, until one is recorded. Before, one failed renewal (a slow SQLite
// lock) left the claim unheld for the task's whole wait, so an unknown outcome could be cleared
// while the server still ran the task.
func TestHoldIsRecordedByALaterRenewal(t *testing.T) {
	server := exec.Command("sleep", "60")
	server.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := server.Start(); err != nil {
		t.Skipf("skipped: no sleep: %v", err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	carrier := fence.GroupCarrier(server.Process.Pid)
	if carrier == "" {
		t.Skip("skipped: this process cannot name a process group (no /proc of its own)")
	}
	st := &unreachable{Store: fence.NewMemoryStore()}
	eng := fence.New(st, fence.Config{LeaseTTL: 300 * time.Millisecond})
	p := &Proxy{opt: Options{Engine: eng, Log: io.Discard}}
	ctx := context.Background()
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "task", Tool: "t", Carrier: carrier})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	hb := p.heartbeat(*adm.Ticket)
	defer hb.stop()
	st.down.Store(true)
	hb.hold(fence.Held(carrier))
	st.down.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := eng.Status(ctx, "task")
		if err != nil {
			t.Fatal(err)
		}
		if _, runs := fence.CarrierRuns(rec.Owner); runs {
			break // held: the running server holds the claim though its holder runs too
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claim's owner %q: never recorded held after the ledger came back", rec.Owner)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
