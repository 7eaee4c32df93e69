//go:build unix

package wrap_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/sqlitelock"
)

// TestClaimWhileAnotherProcessHoldsTheLedgersLock: docs/wrap.md says what a fresh call does
// when another process holds the SQLite ledger's write lock before the call is claimed (a
// sqlite3 shell inside a transaction, a backup): nothing is forwarded until the claim is
// written; if the lock comes back within the store's busy timeout the call runs once (also one
// its agent cancelled meanwhile: an admitted claim is seen through, and a retry replays it);
// past the busy timeout the call is answered store_error and did not run, and a retry runs it.
func TestClaimWhileAnotherProcessHoldsTheLedgersLock(t *testing.T) {
	t.Parallel()
	t.Run("given-back", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		w := r.wrap()
		unlock := sqlitelock.Hold(t, r.ledger)
		cancelled := `{"amount":1,"order":"locked-cancelled"}`
		kept := `{"amount":2,"order":"locked-kept"}`
		ctx, cancel := context.WithCancel(context.Background())
		gone := make(chan error, 1)
		go func() {
			_, err := w.Session.CallTool(ctx, "charge", []byte(cancelled))
			gone <- err
		}()
		got := make(chan result, 1)
		errs := make(chan error, 1)
		go func() {
			x, err := callE(w.Session, "charge", kept)
			if err != nil {
				errs <- err
				return
			}
			got <- x
		}()
		time.Sleep(time.Second) // both calls meet the lock (no bound is tested)
		cancel()
		<-gone
		time.Sleep(time.Second)
		if n := r.effectCount(); n != 0 {
			t.Fatalf("%d calls ran while their claims could not be written; log:\n%s", n, w.log.String())
		}
		unlock()
		select {
		case x := <-got:
			if x.IsError || x.replayed() {
				t.Fatalf("the call once the lock was given back: %s (isError %v, replayed %v); want it run", x.text(), x.IsError, x.replayed())
			}
		case err := <-errs:
			t.Fatalf("the call once the lock was given back: %v; log:\n%s", err, w.log.String())
		case <-time.After(60 * time.Second):
			t.Fatalf("no answer 60 s after the lock was given back; log:\n%s", w.log.String())
		}
		// The cancelled call's retry: it ran once in all, whether its admitted claim was seen
		// through (the retry replays) or not (the retry runs it).
		var retry result
		waitFor(t, "the cancelled call's claim to be settled", func() bool {
			var err error
			retry, err = callE(w.Session, "charge", cancelled)
			return err == nil && !strings.Contains(string(retry.Meta["effectfence/code"]), "in_flight")
		})
		if retry.IsError {
			t.Fatalf("the cancelled call's retry: %s (meta %s)", retry.text(), retry.Meta)
		}
		if n := r.effectCount(); n != 2 {
			t.Fatalf("%d executions; want 2 (each call once); log:\n%s", n, w.log.String())
		}
	})
	t.Run("past-the-busy-timeout", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		w := r.wrap()
		unlock := sqlitelock.Hold(t, r.ledger)
		args := `{"amount":3,"order":"locked-long"}`
		start := time.Now()
		x, err := callE(w.Session, "charge", args)
		if err != nil {
			t.Fatalf("the call against a ledger locked past the busy timeout: %v; log:\n%s", err, w.log.String())
		}
		if !x.IsError || string(x.Meta["effectfence/code"]) != `"store_error"` || r.effectCount() != 0 {
			t.Fatalf("after %v: %s (isError %v, meta %s), %d executions; want store_error, not run; log:\n%s",
				time.Since(start).Round(time.Second), x.text(), x.IsError, x.Meta, r.effectCount(), w.log.String())
		}
		unlock()
		if y := call(t, w.Session, "charge", args); y.IsError || y.replayed() || r.effectCount() != 1 {
			t.Fatalf("the retry once the lock was given back: %s (isError %v, replayed %v), %d executions; want it run once", y.text(), y.IsError, y.replayed(), r.effectCount())
		}
	})
}
