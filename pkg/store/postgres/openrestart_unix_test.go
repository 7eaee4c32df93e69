//go:build unix

package postgres

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgcluster"
)

// TestServerCrashAtEachRoundTripOfAFirstOpen: the server (a private cluster) is killed as a
// power cut kills it right after it ran each round trip of a first Open in turn (the schema's
// creation and migration among them), before the answer reaches the store, and started again
// (crash recovery). The next Open finds the ledger whole, at the current version, or none yet
// and makes it; one admission per intent follows. A half-made ledger, or a migration the
// server acknowledged to nobody and then lost half of, would show here.
func TestServerCrashAtEachRoundTripOfAFirstOpen(t *testing.T) {
	t.Parallel()
	c := pgcluster.New(t)
	p, err := netcut.NewPostgres(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	u, err := url.Parse(c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	open := func(raw, schema string) (*Store, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return Open(ctx, Config{URL: raw, Schema: schema, MaxConns: 2, Brief: true})
	}
	before := p.RoundTrips()
	s, err := open(u.String(), "counted")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	n := int(p.RoundTrips() - before)
	if n < 5 {
		t.Fatalf("a first Open took %d round trips", n)
	}
	for k := 1; k <= n; k++ {
		schema := fmt.Sprintf("ledger_%d", k)
		var crashed atomic.Bool
		lost := p.Lost()
		p.LoseAnswerAnd(k, 0, func() { c.Crash(); crashed.Store(true) })
		first, ferr := open(u.String(), schema)
		if first != nil {
			first.Close()
		}
		p.LoseAnswer(0, 0)
		if p.Lost() == lost || !crashed.Load() {
			t.Fatalf("round trip %d of %d: the server was not crashed (Open: %v)", k, n, ferr)
		}
		if ferr != nil && strings.Contains(ferr.Error(), "schema name") {
			t.Fatalf("round trip %d: the first Open blamed the schema's name: %v", k, ferr)
		}
		c.Start()
		again, err := open(c.URL("postgres"), schema)
		if err != nil {
			t.Fatalf("round trip %d: the Open after the crash (the first: %v): %v", k, ferr, err)
		}
		got := c.Query("postgres", "SELECT (SELECT version FROM "+quoteIdent(schema)+".effectfence_version)::text || '/' || (SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'effectfence%')::text", schema)
		if want := fmt.Sprintf("%d/7", schemaVersion); strings.Join(got, ",") != want {
			t.Fatalf("round trip %d: the ledger after the crash and the next Open: %v, want %s", k, got, want)
		}
		other, err := open(c.URL("postgres"), schema)
		if err != nil {
			t.Fatal(err)
		}
		oneAdmission(t, "crash:1", fence.New(again, fence.Config{Owner: "host-a/1/1"}), fence.New(other, fence.Config{Owner: "host-b/1/1"}))
		again.Close()
		other.Close()
		t.Logf("round trip %d: the first Open: %v", k, ferr)
	}
}
