package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerClearCommitAnswerLost: `ledger clear` on PostgreSQL through a proxy, with a
// trigger that holds the clear's transaction for a moment after its COMMIT was sent (the
// clear's batch, COMMIT included, is on the server). Three adversaries:
//   - the proxy holds the answer, the transaction commits, then the proxy drops every
//     connection and refuses new ones: the clear happened and the database cannot be asked;
//     the command says the outcome is unknown (exit 1) and how to find it out, never that the
//     clear failed or succeeded;
//   - the same, the database reachable again at once: the store learns the commit landed, and
//     the command says cleared (exit 0);
//   - the backend is terminated (pg_terminate_backend) while the transaction is held: it
//     aborts; the command says the intent was not cleared (exit 1), and it is not.
func TestLedgerClearCommitAnswerLost(t *testing.T) {
	p, through, direct := pgThrough(t, netcut.NewPostgres)
	var b [4]byte
	_, _ = rand.Read(b[:])
	app := "effectfence-clearcut-" + hex.EncodeToString(b[:])
	q := through.Query()
	q.Set("sslmode", "disable")
	q.Set("application_name", app)
	through.RawQuery = q.Encode()
	proxied := through.String()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := store.Open(ctx, store.Options{Ledger: direct})
	if err != nil {
		t.Fatal(err)
	}
	for _, intent := range []string{"unknown", "landed", "aborted"} {
		if _, err := l.Prepare(ctx, fence.Request{Intent: "charge:" + intent, Tool: "charge", Args: []byte(`{}`), Agent: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, `CREATE FUNCTION hold_clear() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.kind = 'clear' THEN PERFORM pg_sleep(2); END IF; RETURN NEW; END $$;
CREATE TRIGGER hold_clear AFTER INSERT ON effectfence_events FOR EACH ROW EXECUTE FUNCTION hold_clear()`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code        int
		out, errOut string
	}
	clear := func(intent string) chan result {
		c := make(chan result, 1)
		go func() {
			code, out, errOut := runCLI(t, "", "ledger", "clear", "charge:"+intent, "--force", "--reason", "checked the PSP", "--ledger", proxied)
			c <- result{code, out, errOut}
		}()
		return c
	}
	// held waits until the clear's transaction sleeps in the trigger, and returns its backend.
	held := func() int64 {
		for {
			var pid int64
			err := admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'PgSleep'", app).Scan(&pid)
			if err == nil {
				return pid
			}
			if err != pgx.ErrNoRows {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond) // polling the server's own view
		}
	}
	committed := func(intent string) {
		for {
			var n int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM effectfence_events WHERE intent = $1 AND kind = 'clear'", "charge:"+intent).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	inFlight := func(intent string) bool {
		code, out, errOut := runCLI(t, "", "ledger", "show", "charge:"+intent, "--json", "--ledger", direct)
		var d struct{ Record fence.Record }
		if code != exitOK || json.Unmarshal([]byte(out), &d) != nil {
			t.Fatalf("show %s: %d %s %s", intent, code, out, errOut)
		}
		return d.Record.State == fence.StateInFlight
	}

	c := clear("unknown")
	held()
	p.Freeze()
	committed("unknown")
	p.Cut(time.Hour)
	r := <-c
	p.Heal()
	t.Logf("answer lost, database away: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	if r.code != exitError || r.out != "" || !strings.Contains(r.errOut, "the outcome is unknown") || !strings.Contains(r.errOut, `"charge:unknown" may or may not be cleared`) ||
		!strings.Contains(r.errOut, "effectfence ledger show charge:unknown --ledger") {
		t.Errorf("a clear whose COMMIT answer was lost: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
	if inFlight("unknown") {
		t.Errorf("the clear committed, but the intent is still held")
	}

	c = clear("landed")
	held()
	p.Freeze()
	committed("landed")
	p.Cut(0)
	p.Heal()
	r = <-c
	if r.code != exitOK || !strings.Contains(r.out, "cleared charge:landed") || inFlight("landed") {
		t.Errorf("a clear whose COMMIT answer was lost, database reachable: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}

	c = clear("aborted")
	pid := held()
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	r = <-c
	t.Logf("backend terminated before COMMIT: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	if r.code != exitError || r.out != "" || !strings.Contains(r.errOut, fmt.Sprintf("%q was not cleared", "charge:aborted")) || !inFlight("aborted") {
		t.Errorf("a clear whose transaction was aborted: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
}
