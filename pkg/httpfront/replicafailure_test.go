package httpfront_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
)

// docs/gateway.md, "Failures are not recorded": a duplicate "waiting in another replica ... on
// the ledger is told the call it waited for failed, and why, and is NOT run (code
// waited_attempt_failed)". Two real gateway processes on one PostgreSQL ledger and scope, each
// over its own server: a call fails (isError) inside the first's server while its duplicate,
// sent to the second, waits for it in the ledger. The duplicate is answered that failure,
// NOT executed: the tool ran once. The intent is then free: a retry through the second
// gateway runs.
func TestReplicaWaiterIsGivenTheFailure(t *testing.T) {
	t.Parallel()
	ledger := pgtest.Ledger(t, "httpfront_failshare")
	u, err := url.Parse(ledger)
	if err != nil {
		t.Fatal(err)
	}
	waiters := fmt.Sprintf("SELECT count(*) FROM %s.effectfence_waiters", pgx.Identifier{u.Query().Get("search_path")}.Sanitize())
	dir := t.TempDir()
	effects, gate := filepath.Join(dir, "effects"), filepath.Join(dir, "gate")
	r1, r2 := startReplica(t, ledger, effects), startReplica(t, ledger, effects)
	c1, c2 := r1.client(t), r2.client(t)
	s1, s2 := c1.open(nil), c2.open(nil)
	args := fmt.Sprintf(`{"tag":"gwshared","until":%q}`, gate)

	type answer struct {
		r   reply
		err error
	}
	post := func(c *gw, sid string, id int) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			r, err := c.post(context.Background(), sid, nil, call(id, "fail", args))
			out <- answer{r, err}
		}()
		return out
	}
	first := post(c1, s1, 2)
	waitLog(t, c1, "mcptest: fail tag=gwshared started")
	dup := post(c2, s2, 3)
	conn, err := pgx.Connect(context.Background(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(context.Background(), waiters).Scan(&n); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the duplicate on the second gateway did not wait in the ledger within a minute\n%s", r2.log.String())
		}
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, d := <-first, <-dup
	if f.err != nil || d.err != nil {
		t.Fatalf("answers: %v, %v", f.err, d.err)
	}
	if runs := mcptest.Effects(effects); len(runs) != 1 || !strings.Contains(f.r.raw[len(f.r.raw)-1], `"isError":true`) {
		t.Fatalf("the first call: %v; executions %q: want its failure, one execution", f.r.raw, runs)
	}
	last := d.r.raw[len(d.r.raw)-1]
	if !strings.Contains(last, `"effectfence/code":"waited_attempt_failed"`) || !strings.Contains(last, "NOT executed") || !strings.Contains(last, `"isError":true`) {
		t.Fatalf("the duplicate that waited on the second gateway was answered %s; want told the call it waited for failed (waited_attempt_failed), NOT executed", last)
	}
	if runs := mcptest.Effects(effects); len(runs) != 1 {
		t.Fatalf("executions after the waiter was answered: %q, want 1", runs)
	}
	// The failure freed the intent: a retry on the second gateway runs (the gate is open).
	again := <-post(c2, s2, 4)
	if runs := mcptest.Effects(effects); again.err != nil || len(runs) != 2 {
		t.Fatalf("a retry after the shared failure: %v %v; executions %q, want it run", again.r.raw, again.err, runs)
	}
}
