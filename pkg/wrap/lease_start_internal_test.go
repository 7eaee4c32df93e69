package wrap

import (
	"context"
	"encoding/json"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// slowBack is a back whose live session, as Current sees it, is a nopConn that ends as a call
// judged by its listing is admitted: its (re)connect blocks until release is closed (a stdio
// server restarting within --init-timeout, a remote server reconnecting), then gives a conn
// counting the tools/call it is sent.
type slowBack struct {
	release chan struct{}
	calls   *atomic.Int32
}

type countConn struct{ calls *atomic.Int32 }

func (c countConn) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if method == "tools/call" {
		c.calls.Add(1)
	}
	return nopConn{}.Call(ctx, method, params)
}
func (countConn) Notify(string, json.RawMessage) error { return nil }
func (countConn) InitResult() json.RawMessage          { return json.RawMessage(`{}`) }

func (b slowBack) Session(ctx context.Context) (Conn, error) {
	select {
	case <-b.release:
		return countConn{b.calls}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (slowBack) Current() Conn                   { return nopConn{} }
func (slowBack) CloseWithin(time.Duration) error { return nil }
func (slowBack) Kill() error                     { return nil }

// TestLeaseRenewedWhileTheServerStarts: an admitted call whose server is (re)starting
// keeps its lease renewed while it waits (as before 297c36e: the heartbeat began before
// sendChild asked for the session). Without it the lease lapses during a start longer than the
// lease, a judge that cannot see the holder takes a re-run-safe claim over and runs it, and
// the first call is still sent: two executions.
func TestLeaseRenewedWhileTheServerStarts(t *testing.T) {
	ctx := context.Background()
	st := fence.NewMemoryStore()
	cannotTell := func(string) fence.Liveness { return fence.CannotTell }
	lease := 300 * time.Millisecond
	eng := fence.New(st, fence.Config{Owner: "holder/1/1", Liveness: cannotTell, LeaseTTL: lease})
	judge := fence.New(st, fence.Config{Owner: "judge/2/2", Liveness: cannotTell, LeaseTTL: lease})
	var calls atomic.Int32
	back := slowBack{release: make(chan struct{}), calls: &calls}
	p, err := New(Options{Backend: func(BackendConfig) Backend { return back }, Engine: eng, Log: io.Discard, Scope: "s", RerunSafe: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Attach(discard{})
	p.child, p.initDone = back, true
	if err := p.tools.refresh(ctx, nopConn{}); err != nil { // listed from the session the call is judged by
		t.Fatal(err)
	}
	done := make(chan []byte)
	go func() {
		m, _ := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`))
		done <- p.toolsCall(ctx, m)
	}()
	var rec fence.Record
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		found := false
		_ = st.View(ctx, func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{}, func(r *fence.Record) bool {
				rec, found = *r, true
				return false
			})
		})
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no claim")
		}
	}
	time.Sleep(3 * lease) // the server is still starting
	adm, err := judge.Prepare(ctx, fence.Request{Intent: rec.Intent, Tool: rec.Tool, Args: rec.Args, ExactArgs: rec.ExactArgs, RerunSafe: true})
	if err == nil && adm.Fresh() {
		calls.Add(1) // the judge runs the call
	}
	close(back.release)
	out := <-done
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d executions, want 1 (judge's Prepare: %v; wrap's answer: %s)", n, err, out)
	}
}
