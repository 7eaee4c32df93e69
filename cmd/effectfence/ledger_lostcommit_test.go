package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// heldCommit is the rig of the lost-COMMIT tests of the operator commands (`ledger clear`,
// `ledger resolve`): a PostgreSQL ledger reached through a proxy that can freeze or cut the
// connection, and a trigger that holds a transaction inserting an event of the given kinds
// (a LIKE pattern) for 2 s after its COMMIT was sent.
type heldCommit struct {
	t       *testing.T
	ctx     context.Context
	p       *netcut.Proxy
	proxied string // the ledger through the proxy, with the rig's application_name
	direct  string // the ledger
	app     string
	admin   *pgx.Conn
}

// cliResult is what one run of the command gave.
type cliResult struct {
	code        int
	out, errOut string
}

// newHeldCommit makes the rig; setup writes the intents the test needs (directly).
func newHeldCommit(t *testing.T, kinds string, setup func(ctx context.Context, l *store.Ledger)) *heldCommit {
	p, through, direct := pgThrough(t, netcut.NewPostgres)
	var b [4]byte
	_, _ = rand.Read(b[:])
	h := &heldCommit{t: t, p: p, direct: direct, app: "effectfence-cut-" + hex.EncodeToString(b[:])}
	q := through.Query()
	q.Set("sslmode", "disable")
	q.Set("application_name", h.app)
	through.RawQuery = q.Encode()
	h.proxied = through.String()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	h.ctx = ctx
	l, err := store.Open(ctx, store.Options{Ledger: direct})
	if err != nil {
		t.Fatal(err)
	}
	setup(ctx, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if h.admin, err = connectLedger(ctx, direct); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.admin.Close(context.Background()) })
	if _, err := h.admin.Exec(ctx, `CREATE FUNCTION hold_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.kind LIKE `+quoteLiteral(kinds)+` THEN PERFORM pg_sleep(2); END IF; RETURN NEW; END $$;
CREATE TRIGGER hold_event AFTER INSERT ON effectfence_events FOR EACH ROW EXECUTE FUNCTION hold_event()`); err != nil {
		t.Fatal(err)
	}
	return h
}

// quoteLiteral is s as an SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := range len(s) {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// run runs the command (args, then --ledger through the proxy) in the background.
func (h *heldCommit) run(args ...string) chan cliResult {
	c := make(chan cliResult, 1)
	go func() {
		code, out, errOut := runCLI(h.t, "", append(args, "--ledger", h.proxied)...)
		c <- cliResult{code, out, errOut}
	}()
	return c
}

// held waits until the command's transaction sleeps in the trigger, and returns its backend.
func (h *heldCommit) held() int64 {
	for {
		var pid int64
		err := h.admin.QueryRow(h.ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'PgSleep'", h.app).Scan(&pid)
		if err == nil {
			return pid
		}
		if err != pgx.ErrNoRows {
			h.t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // polling the server's own view
	}
}

// committed waits until an event of kind about intent is committed.
func (h *heldCommit) committed(intent, kind string) {
	for {
		var n int
		if err := h.admin.QueryRow(h.ctx, "SELECT count(*) FROM effectfence_events WHERE intent = $1 AND kind = $2", intent, kind).Scan(&n); err != nil {
			h.t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// state is the intent's state in the ledger (read directly; StateNone when it holds none).
func (h *heldCommit) state(intent string) fence.State {
	code, out, errOut := runCLI(h.t, "", "ledger", "show", intent, "--json", "--ledger", h.direct)
	var d struct{ Record fence.Record }
	if code != exitOK || json.Unmarshal([]byte(out), &d) != nil {
		h.t.Fatalf("show %s: %d %s %s", intent, code, out, errOut)
	}
	return d.Record.State
}

// adversaries runs the command three times, on intents charge:unknown, charge:landed and
// charge:aborted, each against one adversary, and returns what each run gave:
//   - lost: the proxy holds the answer, the transaction commits (its event of kind is
//     committed), then the proxy drops every connection and refuses new ones for an hour;
//   - landed: the same, the database reachable again at once;
//   - aborted: the backend is terminated (pg_terminate_backend) while the transaction is held.
func (h *heldCommit) adversaries(kind string, start func(intent string) chan cliResult) (lost, landed, aborted cliResult) {
	for _, cut := range []time.Duration{time.Hour, 0} {
		intent := "unknown"
		if cut == 0 {
			intent = "landed"
		}
		c := start(intent)
		h.held()
		h.p.Freeze()
		h.committed("charge:"+intent, kind)
		h.p.Cut(cut)
		if cut > 0 {
			lost = <-c
			h.p.Heal()
			h.t.Logf("answer lost, database away: exit %d\nstdout %s\nstderr %s", lost.code, lost.out, lost.errOut)
		} else {
			h.p.Heal()
			landed = <-c
		}
	}
	c := start("aborted")
	pid := h.held()
	if _, err := h.admin.Exec(h.ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		h.t.Fatal(err)
	}
	aborted = <-c
	h.t.Logf("backend terminated before COMMIT: exit %d\nstdout %s\nstderr %s", aborted.code, aborted.out, aborted.errOut)
	return lost, landed, aborted
}
