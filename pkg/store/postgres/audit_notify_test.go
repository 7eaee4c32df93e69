package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestNotifyOnlyWhenSomeoneWaits holds docs/postgres.md's "a notification being sent only for
// intents someone is waiting on" (PostgreSQL serialises the commits of notifying transactions
// on one server-wide lock, so notifying on every outcome would serialise every intent's
// commit). A plain connection LISTENs on the ledger's channel; every way a claim ends (a
// one-statement commit, a commit in a transaction, abort, release, clear) runs with nobody
// waiting; then the test sends a marker of its own. Notifications arrive in commit order, so
// the first one received must be the marker. With a waiter registered, the intent's
// notification comes before the marker (the control: the listener does hear the store).
func TestNotifyOnlyWhenSomeoneWaits(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	sa, sb := openSized(t, schema, 2), openSized(t, schema, 2)
	a := fence.New(sa, fence.Config{Owner: "host-a/1/1"})
	b := fence.New(sb, fence.Config{Owner: "host-b/1/1"})

	listen := admin(t, "")
	if _, err := listen.Exec(ctx, "LISTEN "+pgx.Identifier{sa.channel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	send := admin(t, "")
	// next returns the payload of the next notification on the channel.
	next := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := listen.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("waiting for a notification: %v", err)
		}
		return n.Payload
	}
	marker := func() {
		t.Helper()
		if _, err := send.Exec(ctx, "SELECT pg_notify($1, 'marker')", sa.channel()); err != nil {
			t.Fatal(err)
		}
	}

	ends := []struct {
		name string
		end  func(tk fence.Ticket) error
	}{
		{"one-statement commit", func(tk fence.Ticket) error { _, err := a.Commit(ctx, tk, []byte(`"ok"`)); return err }},
		// b's store never wrote this claim: its commit is a transaction.
		{"transaction commit", func(tk fence.Ticket) error { _, err := b.Commit(ctx, tk, []byte(`"ok"`)); return err }},
		{"abort", func(tk fence.Ticket) error { return a.Abort(ctx, tk, "timeout") }},
		{"release", func(tk fence.Ticket) error { return a.Release(ctx, tk, "declined") }},
		{"clear", func(tk fence.Ticket) error { _, err := a.Clear(ctx, tk.Intent, "op", "checked"); return err }},
	}
	for _, waited := range []bool{false, true} {
		for _, c := range ends {
			r := fence.Request{Intent: "nobody-waits:" + c.name, Tool: "t"}
			if waited {
				r.Intent = "waited-on:" + c.name
			}
			adm, err := a.Prepare(ctx, r)
			if err != nil || !adm.Fresh() {
				t.Fatalf("%s: prepare %+v %v", r.Intent, adm, err)
			}
			stop := func() {}
			if waited {
				var err error
				if _, stop, err = sb.Watch(ctx, r.Intent); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.end(*adm.Ticket); err != nil {
				t.Fatalf("%s: %v", r.Intent, err)
			}
			stop()
			marker()
			got := next()
			switch {
			case !waited && got != "marker":
				t.Errorf("%s with nobody waiting sent a notification (%q)", c.name, got)
			case waited && got != r.Intent:
				t.Errorf("%s with a waiter: first notification %q, want the intent", c.name, got)
			}
			for got != "marker" {
				got = next()
			}
		}
	}
}
