package postgres

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestRenewalPassesFrozenIdleConnections: every connection the pool holds stops answering
// (netcut holds their bytes and closes nothing: a proxy in front of a server that failed over,
// keeping its clients' old connections), while a new connection reaches the server. A lease
// renewal given the first try wrap gives it under the default lease (a third of the 40 s then
// left) must be taken: pgxpool pings each idle connection before handing it out, and a ping
// no longer waits longer than pingBound. Before, the first ping waited for the try's whole
// deadline, and whether one of wrap's later tries (about seven before the lease lapses) met
// a working connection depended on the pool destroying the others by chance: with a 20 s
// lease, the lease lapsed under a running holder in some runs.
func TestRenewalPassesFrozenIdleConnections(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	p, err := netcut.NewPostgres(pgHost(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	ctx := context.Background()
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	s, err := Open(octx, Config{URL: u.String(), Schema: schema}) // wrap's pool: 16, 8 warm
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e := fence.New(s, fence.Config{})
	adm, err := e.Prepare(ctx, fence.Request{Intent: "frozen-pool:1", Tool: "charge", Args: []byte(`{"usd":1}`), RerunSafe: true})
	if err != nil || !adm.Fresh() {
		t.Fatalf("claim: %+v %v", adm, err)
	}
	// Idle long enough to be pinged before use (pgxpool: more than a second), as a held
	// call's connections are at its renewal, a third of the lease after its claim.
	time.Sleep(1500 * time.Millisecond)
	frozen := s.pool.Stat().IdleConns()
	if frozen < 8 {
		t.Fatalf("%d idle connections, want the pool's 8 warm ones at least", frozen)
	}
	p.FreezeOpen()
	t.Cleanup(p.Heal)
	// The first try wrap gives a renewal under the default lease: a third of the 40 s left.
	// The pool's start-up may have opened a few more than 8; each costs pingBound.
	try := max(40*time.Second/3, time.Duration(frozen)*pingBound+5*time.Second)
	rctx, cancel := context.WithTimeout(ctx, try)
	defer cancel()
	if _, err := e.Heartbeat(rctx, *adm.Ticket); err != nil {
		t.Fatalf("a renewal given %s, the pool's %d idle connections frozen and a new one answered: %v", try.Round(time.Second), frozen, err)
	}
}
