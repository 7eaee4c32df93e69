package fence_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
)

// A Settle on an engine that is closed, or closes while the Settle waits for a ledger that does
// not answer, ends:
// its outcome kept in the spool (SpooledError), where the next process opening the ledger
// records it. Its store never answers again, so before, a Settle given a context that never
// ends (context.Background, as its doc allows) retried every 2 s for ever.
func TestSettleEndsWhenItsEngineCloses(t *testing.T) {
	ctx := context.Background()
	for _, closeFirst := range []bool{true, false} {
		ds := &fencetest.DownStore{Store: fence.NewMemoryStore()}
		e := fence.New(ds, fence.Config{SpoolDir: t.TempDir()})
		adm, err := e.Prepare(ctx, fence.Request{Intent: "x", Tool: "t"})
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare: %+v %v", adm, err)
		}
		if closeFirst {
			e.Close()
		} else {
			ds.Down.Store(true) // the Settle waits for the ledger
		}
		done := make(chan error, 1)
		go func() {
			_, err := e.Settle(ctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"charged"`)})
			done <- err
		}()
		if !closeFirst {
			time.Sleep(300 * time.Millisecond)
			e.Close()
		}
		select {
		case err := <-done:
			if sp := (fence.SpooledError{}); !errors.As(err, &sp) {
				t.Errorf("closed first %v: settle answered %v; want its outcome kept in the spool", closeFirst, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("closed first %v: settle still retrying 10 s after its engine closed", closeFirst)
		}
	}
}

// TestSettleEndingAtCloseDoesNotPromiseARetry: when neither the ledger nor the spool takes an
// outcome and the engine closes, no Recover or drain of this engine will ever try it again; the
// answer said it was "held in this process's memory, and every Recover tries the ledger and
// the spool again while the process runs".
func TestSettleEndingAtCloseDoesNotPromiseARetry(t *testing.T) {
	ctx := context.Background()
	ds := &fencetest.DownStore{Store: fence.NewMemoryStore()}
	e := fence.New(ds, fence.Config{SpoolDir: t.TempDir() + "/\x00"}) // no file system takes it
	adm, err := e.Prepare(ctx, fence.Request{Intent: "x", Tool: "t"})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	ds.Down.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := e.Settle(ctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"charged"`)})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	e.Close()
	select {
	case err := <-done:
		if err == nil || strings.Contains(err.Error(), "every Recover tries") || !strings.Contains(err.Error(), "closed") {
			t.Errorf("settle ended by Close: %v; want it to say the engine closed, and no retry promised", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("settle still retrying 10 s after its engine closed")
	}
}
