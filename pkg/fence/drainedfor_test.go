package fence

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A duplicate refused as unknown, whose outcome another process recorded (and removed from the
// spool) before this one looked: nothing waits any more, and the ledger now holds the outcome.
// DrainedFor says to ask again, and the second Prepare replays it. Before, DrainedFor said no
// when nothing waited: the duplicate was told an operator must decide, for an outcome recorded
// a moment before.
func TestDrainedForAsksAgainWhenTheOutcomeWasRecordedBeforeItLooked(t *testing.T) {
	ctx := context.Background()
	st := NewMemoryStore()
	// The holder's claims lapse at once, so that the duplicate finds its intent unknown.
	holder := New(st, Config{LeaseTTL: time.Nanosecond, Owner: "holder", SpoolDir: t.TempDir()})
	dup := New(st, Config{Owner: "dup", SpoolDir: t.TempDir()})
	req := Request{Intent: "charge:1", Agent: "a", Tool: "charge", Args: []byte(`{"cents":100}`)}
	adm, err := holder.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("holder's Prepare = %+v, %v; want admitted", adm, err)
	}
	time.Sleep(time.Millisecond)
	_, err = dup.Prepare(ctx, req)
	var pf PriorFailureError
	if !errors.As(err, &pf) || pf.State != StateUnknown {
		t.Fatalf("duplicate's Prepare = %v; want refused as unknown (the holder's lease lapsed)", err)
	}
	// Still unknown in the ledger: asking again would only refuse (and count) it twice.
	if again, derr := dup.DrainedFor(ctx, err); again || derr != nil {
		t.Fatalf("DrainedFor = %v, %v with the intent still unknown; want false", again, derr)
	}
	// The holder's outcome reaches the ledger now (as another process's drain would record it).
	if _, err := holder.Commit(ctx, *adm.Ticket, []byte(`{"charged":true}`)); err != nil {
		t.Fatalf("the holder's commit of its unknown intent: %v", err)
	}
	again, derr := dup.DrainedFor(ctx, err)
	if !again || derr != nil {
		t.Fatalf("DrainedFor = %v, %v with the outcome recorded since the refusal; want true: ask again", again, derr)
	}
	adm, err = dup.Prepare(ctx, req)
	if err != nil || adm.Fresh() || adm.Cert == nil || string(adm.Cert.Result) != `{"charged":true}` {
		t.Fatalf("asked again: %+v, %v; want the recorded outcome replayed", adm, err)
	}
}
