package main

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

	"github.com/effectfence/effectfence/pkg/store"
)

// pgLedgerWithClock is pgLedger whose database clock is off the host's by shift: the schema
// holds a clock_timestamp() that adds shift to the server's, and the URL's search_path puts
// it before pg_catalog, so every process on the ledger reads a database clock that is not
// this host's, as it does where the database runs on another host whose clock is off.
func pgLedgerWithClock(t *testing.T, shift time.Duration) string {
	t.Helper()
	u, err := url.Parse(pgLedger(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	schema := q.Get("search_path")
	id := pgx.Identifier{schema}.Sanitize()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("EFFECTFENCE_TEST_POSTGRES"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+id); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE FUNCTION %s.clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE AS $$ SELECT pg_catalog.clock_timestamp() + interval '%d seconds' $$", id, int64(shift/time.Second))); err != nil {
		t.Fatal(err)
	}
	q.Set("search_path", schema+",pg_catalog")
	u.RawQuery = q.Encode()
	return u.String()
}

// dbNow reads the clock of the ledger at loc, as its processes read it.
func dbNow(t *testing.T, loc string) time.Time {
	t.Helper()
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("pool_min_conns") // the store's, not the server's
	u.RawQuery = q.Encode()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var now time.Time
	if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// A PostgreSQL ledger's leases run by the database's clock (docs/postgres.md), and clear and
// resolve --did-not-happen judge a killed holder's lease by it. ls and show must judge it by
// the same clock: with the database's clock a day behind the operator's host, they judged the
// lease by the host's, called it lapsed, left the lease out and offered --did-not-happen as a
// command that would go through, while clear was refused for another hour; a day ahead, they
// said the lease ran and that clear was refused, while clear went through.
func TestLedgerViewsJudgeTheLeaseByTheLedgersClock(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		shift time.Duration
		lease string // EFFECTFENCE_LEASE_SECS of the holder
		runs  bool   // the lease runs by the database's clock when the views look
	}{
		{"behind", -24 * time.Hour, "3600", true},
		{"ahead", 24 * time.Hour, "1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			loc, effects := pgLedgerWithClock(t, c.shift), filepath.Join(t.TempDir(), "effects")
			h := startHelper(t, "hold", loc, effects, store.EnvLeaseSecs+"="+c.lease)
			if h.line != "admitted" {
				t.Fatalf("first process: %q", h.line)
			}
			h.kill9(t)
			if r := runBinary(t, nil, "", "ledger", "ls", "--ledger", loc, "--json"); r.code != exitOK || !strings.Contains(r.stdout, `"state": "unknown"`) {
				t.Fatalf("ledger ls --json = %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			// The store reads the database's clock as clock_timestamp(), unqualified: were it
			// pg_catalog's, the lease would be this host's time and the test would prove nothing.
			off := time.Until(leaseUntil(t, loc))
			if shifted := c.shift < 0 && off < c.shift/2 || c.shift > 0 && off > c.shift/2; !shifted {
				t.Fatalf("the claim's lease ends %s from now: the database's clock, shifted by %s, is not the one the store read", off, c.shift)
			}
			if !c.runs {
				// Wait for the database's clock to pass the lease, as clear reads it.
				until := leaseUntil(t, loc)
				for !dbNow(t, loc).After(until) {
					time.Sleep(50 * time.Millisecond)
				}
			}
			lease := stamp(leaseUntil(t, loc))

			r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "show", "charge:order-7", "--ledger", loc)
			if r.code != exitOK {
				t.Fatalf("ledger show = %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			show := r.stdout
			if r = runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "ls", "--ledger", loc); r.code != exitOK {
				t.Fatalf("ledger ls = %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			lsLease := "" // the row's "lease until / expires" cell
			for _, ln := range strings.Split(r.stdout, "\n") {
				if cells := strings.Split(ln, "│"); len(cells) == 10 && strings.TrimSpace(cells[1]) == "charge:order-7" {
					lsLease = strings.TrimSpace(cells[7])
				}
			}
			ls := r.stdout
			saysRuns := strings.Contains(show, "lease    until "+lease) && strings.Contains(show, "Until then `resolve --did-not-happen` and `clear` are refused")
			offersNow := strings.Contains(show, "# it did not: the next attempt runs")
			if c.runs && (!saysRuns || offersNow || lsLease != lease) {
				t.Errorf("the lease runs until %s by the ledger's clock, but ledger show and ls do not say so:\n%s\n%s", lease, show, ls)
			}
			if !c.runs && (saysRuns || !offersNow || lsLease != "") {
				t.Errorf("the lease lapsed at %s by the ledger's clock, but ledger show or ls says it runs:\n%s\n%s", lease, show, ls)
			}

			// What they say is what clear does.
			r = runBinary(t, nil, "", "ledger", "clear", "charge:order-7", "--ledger", loc, "--reason", "checked")
			if c.runs && (r.code != exitError || !strings.Contains(r.stderr, "runs until")) {
				t.Fatalf("clear within the lease = %d %s", r.code, r.stderr)
			}
			if !c.runs && r.code != exitOK {
				t.Fatalf("clear after the lease = %d %s", r.code, r.stderr)
			}
		})
	}
}

// leaseUntil is the lease of charge:order-7's claim in the ledger at loc, as ledger show
// --json gives it (the binary's: runCLI's commands share their flags, and this test's cases
// run at once).
func leaseUntil(t *testing.T, loc string) time.Time {
	t.Helper()
	r := runBinary(t, nil, "", "ledger", "show", "charge:order-7", "--ledger", loc, "--json")
	out := r.stdout
	const key = `"lease_until": "`
	i := strings.Index(out, key)
	if r.code != exitOK || i < 0 {
		t.Fatalf("ledger show --json = %d\n%s%s", r.code, out, r.stderr)
	}
	until, err := time.Parse(time.RFC3339Nano, out[i+len(key):i+len(key)+strings.IndexByte(out[i+len(key):], '"')])
	if err != nil {
		t.Fatal(err)
	}
	return until
}
