package fence_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// An engine made without a store (fence.New(nil, …), a library user's slip) refuses every
// call with an error that says so, as a closed store does. Before, the first Prepare was a nil
// pointer dereference.
func TestEngineWithoutAStoreRefusesEveryCall(t *testing.T) {
	ctx := context.Background()
	e := fence.New(nil, fence.Config{})
	req := fence.Request{Intent: "charge:order-1", Tool: "charge", Args: []byte(`{"amount":1}`)}
	tk := fence.Ticket{Intent: req.Intent, Token: 1, Nonce: "00"}
	calls := map[string]func() error{
		"Prepare":     func() error { _, err := e.Prepare(ctx, req); return err },
		"PrepareWait": func() error { _, err := e.PrepareWait(ctx, req, time.Millisecond); return err },
		"Commit":      func() error { _, err := e.Commit(ctx, tk, []byte(`1`)); return err },
		"Release":     func() error { return e.Release(ctx, tk, "") },
		"Abort":       func() error { return e.Abort(ctx, tk, "") },
		"Heartbeat":   func() error { _, err := e.Heartbeat(ctx, tk); return err },
		"Status":      func() error { _, err := e.Status(ctx, req.Intent); return err },
		"Current":     func() error { _, err := e.Current(ctx, "d"); return err },
		"Clear":       func() error { _, err := e.Clear(ctx, req.Intent, "op", "test"); return err },
		"Sweep":       func() error { _, err := e.Sweep(ctx); return err },
		"Recover":     func() error { _, err := e.Recover(ctx); return err },
		"Stats":       func() error { _, err := e.Stats(ctx); return err },
		"Close":       func() error { return e.Close() },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s panicked: %v", name, r)
					}
				}()
				err = call()
			}()
			if err == nil || !strings.Contains(err.Error(), "no store") {
				t.Fatalf("%s = %v; want an error saying the engine has no store", name, err)
			}
		})
	}
}
