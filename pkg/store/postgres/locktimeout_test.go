package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestLockTimeoutOfTheSessionIsExplained: a role whose lock_timeout (ALTER ROLE … SET, as
// managed services and DBAs set it) ends a claim's wait for the intent's lock, which another
// transaction holds. The claim is refused store_error, not admitted, with a text that names
// lock_timeout and what waited, and says nothing was recorded; nothing is, and once the lock
// is free the retry is admitted. Before, the text was the server's alone ("canceling statement
// due to lock timeout").
func TestLockTimeoutOfTheSessionIsExplained(t *testing.T) {
	sessionTimeoutExplained(t, "effectfence_test_lockto", "lock_timeout", "50ms")
}

// TestStatementTimeoutOfTheSessionIsExplained: the same with the role's statement_timeout,
// which ends the same wait (query_canceled). Before, the text was the server's alone
// ("canceling statement due to statement timeout"). statement_timeout ends every statement of
// the role, Open's, Status's and the retry's too, so it is a second, not lock_timeout's 50 ms.
// With 50 ms it failed once in a full CI run (0.49 s, the text not kept; 30 runs beside six
// busy loops did not repeat it): any statement of the role slower than 50 ms on a loaded
// machine fails it for a reason that is not the wait it is about.
func TestStatementTimeoutOfTheSessionIsExplained(t *testing.T) {
	sessionTimeoutExplained(t, "effectfence_test_stmtto", "statement_timeout", "1s")
}

func sessionTimeoutExplained(t *testing.T, role, setting, limit string) {
	ctx := context.Background()
	conn := admin(t, "")
	_, url := roleWithSettings(t, role, "pool_max_conns=2&pool_min_conns=1", setting+" = '"+limit+"'")
	s, err := Open(ctx, Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := fence.New(s, fence.Config{Owner: "host-a/1/1"})
	req := fence.Request{Intent: "lock-timeout:1", Tool: "charge", Args: []byte(`{"usd":1}`)}
	for _, speculate := range []bool{false, true} {
		s.noFreshSpeculation.Store(!speculate)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Another transaction holds the intent's lock, as another attempt being decided does.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(s.Schema(), "intent", req.Intent)); err != nil {
			t.Fatal(err)
		}
		adm, err := e.Prepare(ctx, req)
		if err == nil || fence.CodeOf(err) != fence.CodeStore {
			t.Fatalf("speculate %v: a claim whose wait for the intent's lock lock_timeout ended: %+v %v, want store_error", speculate, adm, err)
		}
		for _, want := range []string{setting, "another attempt of the same intent", "nothing of this transaction was recorded"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("speculate %v: the refusal %q does not say %q", speculate, err, want)
			}
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := e.Status(ctx, req.Intent)
		if err != nil || st.State != fence.StateNone {
			t.Fatalf("speculate %v: after the refusal the intent is %+v %v, want no record", speculate, st, err)
		}
	}
	adm, err := e.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("the retry once the lock is free: %+v %v, want admitted", adm, err)
	}
}
