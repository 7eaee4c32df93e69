package main

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// effectfence_ledger_attempts_total is a counter: it must never go down, or Prometheus reads a
// restart of the process and rate() and increase() count the whole total again. A process's
// counts travel with its next ledger write, and while that write is under way they are in
// neither the ledger it reads nor its own unflushed counts. Against the real binary on a real
// PostgreSQL ledger: a replay (counted, not written yet), then a fresh call whose claim waits
// for a lock another session holds on the counters table (its write carries the replay's
// count): a scrape then must still show the replay. Before 2026-12-07 it showed
// result="replayed" going from 1 to 0 and back to 1 once the claim landed.
func TestGatewayLedgerAttemptsNeverGoDown(t *testing.T) {
	t.Parallel()
	ledger := pgLedger(t)
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	g := startGateway(t, "--ledger", ledger, "--listen", "127.0.0.1:0",
		"--", effectfence(t), "demo-server", "--effects", effects)
	sid := g.initialize(t)
	call := func(id, amount string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":` + amount + `,"customer":"cus_1"}}}`
	}
	for _, id := range []string{"2", "3"} { // run, then replayed
		if _, body := g.post(t, "", sid, call(id, "100")); !strings.Contains(body, `"result"`) {
			t.Fatalf("charge %s: %s", id, body)
		}
	}
	const replayed = `effectfence_ledger_attempts_total{result="replayed"}`
	const admitted = `effectfence_ledger_attempts_total{result="admitted"}`
	before := scrapeMetrics(t, g.url)
	if metricOf(t, before, replayed) != 1 || metricOf(t, before, admitted) != 1 {
		t.Fatalf("after a call and its duplicate:\n%s", before)
	}

	// Another session holds the counters table: the next write that carries counts waits.
	u, err := url.Parse(ledger)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("pool_min_conns")
	u.RawQuery = q.Encode()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	hold, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, "LOCK TABLE effectfence_counters IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	answer := g.postAsync(sid, call("4", "200"))
	// Wait for the claim to wait for the lock (an event: the server lists the waiter).
	watch, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := watch.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'effectfence_counters'::regclass").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case a := <-answer:
			t.Fatalf("the fresh charge was answered while the counters were locked: %s", a)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write waited for the counters table in a minute; log:\n%s", g.logText())
		}
	}
	during := scrapeMetrics(t, g.url)
	if got := metricOf(t, during, replayed); got < 1 {
		t.Errorf("%s went down from 1 to %d while a write carrying the replay's count waited:\n%s", replayed, got, during)
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-answer; !strings.Contains(a, `"result"`) {
		t.Fatalf("the fresh charge: %s", a)
	}
	after := scrapeMetrics(t, g.url)
	if metricOf(t, after, replayed) != 1 || metricOf(t, after, admitted) != 2 {
		t.Fatalf("once the write landed:\n%s", after)
	}
	if n := effectsOf(t, effects); n != 2 {
		t.Fatalf("%d charges ran, want 2", n)
	}
}
