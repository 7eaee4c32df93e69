package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestServeClaimThatLandsAfterItsPrepareWasAnsweredIsReleased: docs/serve.md says a
// fence_prepare whose claim's write has not returned 10 s after its bound is answered
// store_error (not admitted), and a claim recorded once the disk answers is released, since
// nobody holds its ticket. Here the claim's commit reaches the ledger's file and its fsync is
// held after the kernel did it (strace), past the prepare's answer: the claim lands after the
// answer and must end released, the audit trail saying why, nothing left in flight or unknown,
// and the next prepare of the intent is admitted fresh.
func TestServeClaimThatLandsAfterItsPrepareWasAnsweredIsReleased(t *testing.T) {
	t.Parallel()
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	a := startServe(t, "--ledger", ledger)
	if p := a.prepare(`{"intent":"warm","tool":"t"}`); p.Status != serve.StatusFresh {
		t.Fatalf("warm-up prepare: %+v", p)
	}
	const prep = `{"intent":"charge:late-claim","tool":"charge","args":{"amount":5}}`
	release := diskfull.StallSyncs(t, a.cmd.Process.Pid, 70*time.Second)
	sent := time.Now()
	raw, isErr := a.call(serve.ToolPrepare, prep)
	t.Logf("answered %s after it was sent, the claim's fsync still held", time.Since(sent).Round(100*time.Millisecond))
	release()
	var r serve.Refusal
	if !isErr || json.Unmarshal(raw, &r) != nil || r.Code != fence.CodeStore {
		t.Fatalf("fence_prepare whose claim's fsync is held: %s; want store_error", raw)
	}

	ctx := context.Background()
	led, err := store.Open(ctx, store.Options{Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	var events []fence.Event
	var recs []*fence.Record
	for deadline := time.Now().Add(30 * time.Second); ; {
		events, recs = nil, nil
		err := led.Store().View(ctx, func(tx fence.Tx) error {
			if err := tx.Events("charge:late-claim", func(ev fence.Event) bool {
				events = append(events, ev)
				return true
			}); err != nil {
				return err
			}
			return tx.Scan(fence.Filter{}, func(rec *fence.Record) bool {
				recs = append(recs, rec)
				return true
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(events) > 0 && events[len(events)-1].Kind == fence.EventRelease || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	released := 0
	for _, ev := range events {
		t.Logf("event %s at %s by %s, claim %d (%s): %s", ev.Kind, ev.At.Format("15:04:05.000"), ev.Who, ev.Token, ev.State, ev.Reason)
		if ev.Kind == fence.EventRelease {
			released++
			if !strings.Contains(ev.Reason, "nobody holds its ticket") {
				t.Errorf("the release's reason %q does not say nobody holds its ticket", ev.Reason)
			}
		}
	}
	if released != 1 {
		t.Fatalf("%d releases of the late claim 30 s after its fsync returned, want 1; stderr:\n%s", released, a.stderr.String())
	}
	for _, rec := range recs {
		if rec.Intent == "charge:late-claim" || rec.State != fence.StateDone && rec.State != fence.StateInFlight {
			t.Errorf("intent %s left %s: %s", rec.Intent, rec.State, rec.Reason)
		}
	}
	if p := a.prepare(prep); p.Status != serve.StatusFresh {
		t.Fatalf("fence_prepare after the late claim was released: %+v; want fresh", p)
	}
}
