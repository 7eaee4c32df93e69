package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// A holder killed mid-call leaves charge:order-7 unknown; `ledger resolve` settles it with each
// of its three answers, on a real SQLite file and on the real PostgreSQL, and real processes
// see the documented state: a replay, a run, a refusal.
func TestLedgerResolveCLI(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	ledgers := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "ledger.db") },
		"postgres": func(t *testing.T) string { return pgLedger(t) },
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			unknown := func(t *testing.T) (loc, effects string) {
				loc, effects = ledgers[kind](t), filepath.Join(t.TempDir(), "effects")
				h := startHelper(t, "hold", loc, effects, store.EnvLeaseSecs+"=1")
				if h.line != "admitted" {
					t.Fatalf("first process: %q", h.line)
				}
				h.kill9(t)
				if got := startHelper(t, "attempt", loc, effects).wait(t); got != "refused prior_failure" {
					t.Fatalf("after the crash a duplicate got %q", got)
				}
				// did-not-happen and clear wait for the lease (1 s here), the holder gone.
				waitLeaseLapsed(t, loc, "charge:order-7")
				return loc, effects
			}
			t.Run("happened", func(t *testing.T) {
				loc, effects := unknown(t)
				code, out, errOut := runCLI(t, "", "ledger", "resolve", "charge:order-7", "--ledger", loc, "--happened", "--ref", "ch_123", "--reason", "ch_123 is in the PSP dashboard", "--json")
				var res struct {
					Resolved, As, Who, Reason string
					PreviousState             fence.State `json:"previous_state"`
					Cert                      fence.Cert
				}
				if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.As != "happened" || res.PreviousState != fence.StateUnknown ||
					res.Who != ledger.Operator()+" via cli" || !strings.Contains(string(res.Cert.Result), "ch_123") {
					t.Fatalf("resolve --happened = %d\n%s%s", code, out, errOut)
				}
				for range 2 {
					if got := startHelper(t, "attempt", loc, effects).wait(t); got != "replay "+res.Cert.Hash {
						t.Fatalf("after happened a duplicate got %q; want replay %s", got, res.Cert.Hash)
					}
				}
				if n := lines(t, effects); n != 1 {
					t.Fatalf("%d executions; want 1", n)
				}
				if code, out, _ := runCLI(t, "", "ledger", "verify", "--ledger", loc); code != exitOK || !strings.Contains(out, "1 verified") {
					t.Fatalf("verify = %d %s", code, out)
				}
				wantEvents(t, loc, "orphan,resolve_happened")
				// Done now: a second answer is refused and changes nothing.
				code, _, errOut = runCLI(t, "", "ledger", "resolve", "charge:order-7", "--ledger", loc, "--did-not-happen", "--reason", "oops")
				if code != exitError || !strings.Contains(errOut, "not_fenced") || !strings.Contains(errOut, "is done") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
					t.Fatalf("resolve of a done intent = %d %q", code, errOut)
				}
			})
			t.Run("did-not-happen", func(t *testing.T) {
				loc, effects := unknown(t)
				code, out, errOut := runCLI(t, "", "ledger", "resolve", "charge:order-7", "--ledger", loc, "--did-not-happen", "--reason", "no charge in the PSP dashboard")
				if code != exitOK || !strings.Contains(out, "resolved charge:order-7 (was unknown) as did_not_happen") || !strings.Contains(out, "next attempt") {
					t.Fatalf("resolve --did-not-happen = %d\n%s%s", code, out, errOut)
				}
				if got := startHelper(t, "attempt", loc, effects).wait(t); !strings.HasPrefix(got, "committed ") {
					t.Fatalf("after did-not-happen the next attempt got %q; want it to run", got)
				}
				if n := lines(t, effects); n != 2 {
					t.Fatalf("%d executions; want 2", n)
				}
				wantEvents(t, loc, "orphan,resolve_did_not_happen")
			})
			t.Run("leave-fenced", func(t *testing.T) {
				loc, effects := unknown(t)
				code, out, errOut := runCLI(t, "", "ledger", "resolve", "charge:order-7", "--ledger", loc, "--leave-fenced", "--reason", "asked the bank, no answer yet")
				if code != exitOK || !strings.Contains(out, "stays fenced") {
					t.Fatalf("resolve --leave-fenced = %d\n%s%s", code, out, errOut)
				}
				if got := startHelper(t, "attempt", loc, effects).wait(t); got != "refused prior_failure" {
					t.Fatalf("after leave-fenced a duplicate got %q", got)
				}
				wantEvents(t, loc, "orphan,resolve_leave_fenced")
				// clear keeps working after a resolve.
				if code, _, errOut := runCLI(t, "", "ledger", "clear", "charge:order-7", "--ledger", loc, "--reason", "bank: no charge"); code != exitOK {
					t.Fatalf("clear after leave-fenced = %d %s", code, errOut)
				}
			})
		})
	}
}

func wantEvents(t *testing.T, loc, want string) {
	t.Helper()
	code, out, _ := runCLI(t, "", "ledger", "show", "charge:order-7", "--ledger", loc, "--json")
	var d ledger.Detail
	if code != exitOK || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("ledger show --json = %d %s", code, out)
	}
	var kinds []string
	for _, ev := range d.Events {
		kinds = append(kinds, ev.Kind)
		if strings.HasPrefix(ev.Kind, "resolve_") && (ev.Who != ledger.Operator()+" via cli" || ev.State != fence.StateUnknown) {
			t.Errorf("resolve event %+v", ev)
		}
	}
	if strings.Join(kinds, ",") != want {
		t.Fatalf("events %v, want %s", kinds, want)
	}
}

// Usage errors exit 2 with one line on stderr, and touch no ledger.
func TestLedgerResolveUsage(t *testing.T) {
	loc := filepath.Join(t.TempDir(), "none.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"i", "--reason", "x"}, "exactly one of --happened"},
		{[]string{"i", "--happened", "--did-not-happen", "--reason", "x"}, "exactly one of --happened"},
		{[]string{"i", "--happened"}, "--reason is required"},
		{[]string{"i", "--did-not-happen", "--ref", "ch_1", "--reason", "x"}, "--happened only"},
		{[]string{"i", "--leave-fenced", "--result", "{}", "--reason", "x"}, "--happened only"},
		{[]string{"i", "--happened", "--result", "{oops", "--reason", "x"}, "--result is not JSON"},
		{[]string{"--happened", "--reason", "x"}, "missing INTENT"},
	} {
		code, out, errOut := runCLI(t, "", append([]string{"ledger", "resolve", "--ledger", loc}, tc.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
			t.Errorf("resolve %v = %d stdout %q stderr %q; want exit 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if code, _, errOut := runCLI(t, "", "ledger", "resolve", "charge:x", "--ledger", loc, "--happened", "--reason", "x"); code != exitError || !strings.Contains(errOut, "no ledger at") {
		t.Fatalf("resolve on a missing ledger = %d %s", code, errOut)
	}
}

// connectLedger opens a plain connection (for a test's own queries) to the server and schema
// of a ledger URL, whose pool parameters (pool_min_conns, pgLedger's) only a pool takes: the
// server refuses them as settings.
func connectLedger(ctx context.Context, ledger string) (*pgx.Conn, error) {
	pc, err := pgxpool.ParseConfig(ledger)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, pc.ConnConfig)
}

// pgLedger returns a PostgreSQL ledger URL in a schema of its own, dropped when the test ends
// (pkg/internal/pgtest does the same for packages under pkg), or skips without a server.
func pgLedger(t *testing.T) string {
	t.Helper()
	raw := os.Getenv("EFFECTFENCE_TEST_POSTGRES")
	if raw == "" {
		t.Skip("SKIP-REQUIRED: EFFECTFENCE_TEST_POSTGRES is not set (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := fmt.Sprintf("effectfence_resolvecli_%d_%s", os.Getpid(), hex.EncodeToString(b[:]))
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	// Few idle connections: four packages run at a time, and the server allows 100 (pgtest.Ledger).
	if !q.Has("pool_min_conns") {
		q.Set("pool_min_conns", "1")
	}
	u.RawQuery = q.Encode()
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, raw)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return u.String()
}
