package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// docs/postgres.md: "two attempts of one intent take turns on a per-intent lock, distinct
// intents never wait for each other". While another transaction holds one intent's lock
// (a slow writer, a stalled connection), a claim, commit and replay of another intent are
// answered, and an attempt of the held intent waits until the lock is let go. No speed is
// asserted: only that the other intent's answers come while the lock is still held.
func TestDistinctIntentsNeverWaitForEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testSchema(t)
	eng := fence.New(openSchema(t, schema), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	held := fence.Request{Intent: "turns:held", Tool: "charge_card", Args: []byte(`{"amount":1}`)}
	free := fence.Request{Intent: "turns:free", Tool: "charge_card", Args: []byte(`{"amount":2}`)}

	conn := admin(t, schema)
	lockTx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lockTx.Rollback(ctx)
	if _, err := lockTx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(eng.Store().(*Store).Schema(), "intent", held.Intent)); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		adm fence.Admission
		err error
	}
	waiting := make(chan answer, 1)
	go func() {
		adm, err := eng.Prepare(ctx, held)
		waiting <- answer{adm, err}
	}()

	// The other intent: claimed, committed and replayed while the lock stays held.
	otherDone := make(chan error, 1)
	go func() {
		adm, err := eng.Prepare(ctx, free)
		if err == nil {
			_, err = eng.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
		}
		if err == nil {
			var again fence.Admission
			if again, err = eng.Prepare(ctx, free); err == nil && again.Fresh() {
				t.Errorf("the duplicate of %s was admitted again", free.Intent)
			}
		}
		otherDone <- err
	}()
	select {
	case err := <-otherDone:
		if err != nil {
			t.Fatalf("the other intent: %v", err)
		}
	case a := <-waiting:
		t.Fatalf("the held intent's attempt was answered while its lock was held: %+v %v", a.adm, a.err)
	case <-time.After(60 * time.Second):
		t.Fatal("the other intent was not answered within 60 s while one intent's lock was held: distinct intents waited for each other")
	}
	select {
	case a := <-waiting:
		t.Fatalf("the held intent's attempt did not wait for its lock: %+v %v", a.adm, a.err)
	default:
	}
	if err := lockTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-waiting; a.err != nil || !a.adm.Fresh() {
		t.Fatalf("the held intent once its lock was let go: %+v %v", a.adm, a.err)
	}
}
