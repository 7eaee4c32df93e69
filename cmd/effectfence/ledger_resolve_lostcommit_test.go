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

// TestLedgerResolveCommitAnswerLost: `ledger resolve` on PostgreSQL through a proxy, with a
// trigger that holds the resolution's transaction after its COMMIT was sent. As for `ledger
// clear` (TestLedgerClearCommitAnswerLost): the answer lost and the database away, the command
// says the outcome is unknown (exit 1) and how to find out, never that it failed or succeeded;
// the answer lost and the database back at once, it says resolved (exit 0); the backend
// terminated before the COMMIT, it says not resolved (exit 1), and the intent is fenced as
// before. Before, the first and last got the store's generic message.
func TestLedgerResolveCommitAnswerLost(t *testing.T) {
	p, through, direct := pgThrough(t, netcut.NewPostgres)
	var b [4]byte
	_, _ = rand.Read(b[:])
	app := "effectfence-resolvecut-" + hex.EncodeToString(b[:])
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
		adm, err := l.Prepare(ctx, fence.Request{Intent: "charge:" + intent, Tool: "charge", Args: []byte(`{}`), Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Abort(ctx, *adm.Ticket, "the PSP timed out"); err != nil { // fenced: failed
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
	if _, err := admin.Exec(ctx, `CREATE FUNCTION hold_resolve() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.kind LIKE 'resolve%' THEN PERFORM pg_sleep(2); END IF; RETURN NEW; END $$;
CREATE TRIGGER hold_resolve AFTER INSERT ON effectfence_events FOR EACH ROW EXECUTE FUNCTION hold_resolve()`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code        int
		out, errOut string
	}
	resolve := func(intent string) chan result {
		c := make(chan result, 1)
		go func() {
			code, out, errOut := runCLI(t, "", "ledger", "resolve", "charge:"+intent, "--did-not-happen", "--reason", "checked the PSP", "--ledger", proxied)
			c <- result{code, out, errOut}
		}()
		return c
	}
	held := func() int64 { // the resolution's transaction sleeps in the trigger: its backend
		for {
			var pid int64
			err := admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'PgSleep'", app).Scan(&pid)
			if err == nil {
				return pid
			}
			if err != pgx.ErrNoRows {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	committed := func(intent string) {
		for {
			var n int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM effectfence_events WHERE intent = $1 AND kind = $2", "charge:"+intent, fence.EventResolveDidNotHappen).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	state := func(intent string) fence.State {
		code, out, errOut := runCLI(t, "", "ledger", "show", "charge:"+intent, "--json", "--ledger", direct)
		var d struct{ Record fence.Record }
		if code != exitOK || json.Unmarshal([]byte(out), &d) != nil {
			return fence.StateNone // no record: freed
		}
		_ = errOut
		return d.Record.State
	}

	c := resolve("unknown")
	held()
	p.Freeze()
	committed("unknown")
	p.Cut(time.Hour)
	r := <-c
	p.Heal()
	t.Logf("answer lost, database away: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	if r.code != exitError || r.out != "" || !strings.Contains(r.errOut, "the outcome is unknown") || !strings.Contains(r.errOut, `"charge:unknown" may or may not be resolved`) ||
		!strings.Contains(r.errOut, "effectfence ledger show charge:unknown --ledger") || !strings.Contains(r.errOut, "a resolve_did_not_happen event by ") {
		t.Errorf("a resolution whose COMMIT answer was lost: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
	if s := state("unknown"); s == fence.StateFailed {
		t.Errorf("the resolution committed, but the intent is still fenced")
	}

	c = resolve("landed")
	held()
	p.Freeze()
	committed("landed")
	p.Cut(0)
	p.Heal()
	r = <-c
	if r.code != exitOK || !strings.Contains(r.out, "resolved charge:landed") || state("landed") == fence.StateFailed {
		t.Errorf("a resolution whose COMMIT answer was lost, database reachable: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}

	c = resolve("aborted")
	pid := held()
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	r = <-c
	t.Logf("backend terminated before COMMIT: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	if r.code != exitError || r.out != "" || !strings.Contains(r.errOut, fmt.Sprintf("%q was not resolved", "charge:aborted")) || state("aborted") != fence.StateFailed {
		t.Errorf("a resolution whose transaction was aborted: exit %d\nstdout %s\nstderr %s", r.code, r.out, r.errOut)
	}
}
