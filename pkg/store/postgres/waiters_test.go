package postgres

import (
	"context"
	"testing"
	"time"
)

// DECISIONS-postgres: "Waiter rows older than an hour are dropped when a listener starts."
// Rows left by processes that died while waiting would otherwise make every outcome of their
// intents send a NOTIFY, which serialises commits on the server's notify lock, forever.
func TestOldWaiterRowsDroppedWhenAListenerStarts(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `INSERT INTO effectfence_waiters (intent, listener, created_at) VALUES
		('old', 'gone-process', now() - interval '61 minutes'), ('young', 'other-process', now() - interval '59 minutes')`); err != nil {
		t.Fatal(err)
	}
	_, stop, err := s.Watch(ctx, "mine")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	left := func() (old, young bool) {
		t.Helper()
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM effectfence_waiters WHERE intent = 'old'),
			EXISTS (SELECT 1 FROM effectfence_waiters WHERE intent = 'young')`).Scan(&old, &young); err != nil {
			t.Fatal(err)
		}
		return old, young
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		old, young := left()
		if !young {
			t.Fatal("the listener dropped a waiter row younger than an hour")
		}
		if !old {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter row older than an hour is still there 30 s after the listener started")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
