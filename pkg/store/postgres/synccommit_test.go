package postgres

import (
	"context"
	"testing"
)

// TestSynchronousCommitKeptOn: a ledger whose connections would default synchronous_commit to
// off (here from the URL; a role's or a database's setting reaches the session the same way)
// commits durably anyway: every connection of the store's pool, the first ones and one opened
// later, has it on. So does one that would default it to local, which waits for no
// synchronous standby (TestFailoverToASynchronousStandby in pkg/wrap). A stronger setting
// (remote_apply) is left as it is.
func TestSynchronousCommitKeptOn(t *testing.T) {
	for _, c := range []struct{ set, want string }{{"off", "on"}, {"remote_apply", "remote_apply"}, {"local", "on"}} {
		schema := testSchema(t)
		s, err := Open(context.Background(), Config{URL: schemaURL(t, schema, map[string]string{"synchronous_commit": c.set, "pool_max_conns": "3", "pool_min_conns": "1"})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ctx := context.Background()
		var held []interface{ Release() }
		release := func() {
			for _, h := range held {
				h.Release()
			}
			held = nil
		}
		t.Cleanup(release) // before Close, which waits for every acquired connection
		for i := range 3 { // the pool's first connection and two it opens on demand
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, conn)
			var got string
			if err := conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("synchronous_commit=%s in the URL: connection %d of the store has %s, want %s", c.set, i, got, c.want)
			}
		}
		release()
	}
}
