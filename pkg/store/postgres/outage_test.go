package postgres

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
)

// newProxy starts a proxy in front of the PostgreSQL server that can cut every connection and
// refuse new ones for a while: the database becomes unreachable, as in a network partition or
// a failover.
func newProxy(t *testing.T, target string) *netcut.Proxy {
	t.Helper()
	p, err := netcut.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// openThrough opens a store on schema through the proxy.
func openThrough(t *testing.T, p *netcut.Proxy, schema string) *Store {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{URL: u.String(), Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func pgHost(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "5432")
	}
	return host
}

// TestOutageAtCommit: PostgreSQL is cut for a second just as a call finishes. The outcome is
// not dropped: Settle keeps it in the spool and retries with the same ticket until the
// database answers; the intent ends done with the holder's result, never left in flight to
// lapse and run again. A cut that outlasts the holder's patience leaves the outcome in the
// spool, and the next process on the ledger records it.
func TestOutageAtCommit(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	p := newProxy(t, pgHost(t))
	spool := t.TempDir()
	st := openThrough(t, p, schema)
	const lease = 500 * time.Millisecond
	eng := fence.New(st, fence.Config{LeaseTTL: lease, SpoolDir: spool})
	ctx := context.Background()
	r := fence.Request{Intent: "outage:1", Tool: "charge", Args: []byte(`{"usd":5}`)}
	adm, err := eng.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	p.Cut(time.Second) // the call ran; the database is gone for a second
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cert, err := eng.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`{"charge":"ch_1"}`)})
	if err != nil {
		t.Fatalf("settle across a one-second outage: %v", err)
	}
	direct := fence.New(openSchema(t, schema), fence.Config{})
	got, err := direct.Prepare(ctx, r)
	if err != nil || got.Fresh() || got.Cert.Hash != cert.Hash {
		t.Fatalf("duplicate after the outage: %+v %v; want the recorded cert", got, err)
	}
	if files, _ := fence.SpoolFiles(spool); len(files) != 0 {
		t.Fatalf("spool not emptied: %v", files)
	}

	// A cut longer than the holder waits: the outcome waits in the spool. Meanwhile the lease
	// lapses and another process finds the claim unknown (never free); the next start drains
	// the spool and the holder's own commit heals the intent.
	r2 := fence.Request{Intent: "outage:2", Tool: "charge", Args: []byte(`{"usd":6}`)}
	adm2, err := eng.Prepare(ctx, r2)
	if err != nil || !adm2.Fresh() {
		t.Fatal(adm2, err)
	}
	p.Cut(3 * time.Second)
	short, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	_, err = eng.Settle(short, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm2.Ticket, Result: []byte(`{"charge":"ch_2"}`)})
	var sp fence.SpooledError
	if !errors.As(err, &sp) {
		t.Fatalf("settle during a long outage: %v; want SpooledError", err)
	}
	time.Sleep(lease)
	_, err = direct.Prepare(ctx, r2)
	var pf fence.PriorFailureError
	if !errors.As(err, &pf) || pf.State != fence.StateUnknown {
		t.Fatalf("lapsed claim during the outage: %v; want unknown", err)
	}
	next := fence.New(openSchema(t, schema), fence.Config{SpoolDir: spool})
	if _, err := next.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := next.Status(ctx, "outage:2")
	if err != nil || rec.State != fence.StateDone || string(rec.Cert.Result) != `{"charge":"ch_2"}` {
		t.Fatalf("after the next start: %+v %v; want done with the spooled result", rec, err)
	}
}
