package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestGatewayCommitAnswerLost: the real binary (wrap --listen, demo server) on a PostgreSQL
// ledger reached through a proxy that loses the answer of the commit of one call (the server
// ran it) and keeps the database away for 400 ms. The call's effect ran once and its answer
// is the tool's; a duplicate is replayed; and `ledger stats` and /metrics count each
// admission once (the commit's counters were counted twice when its answer was lost:
// pkg/store/postgres/doubt.go).
func TestGatewayCommitAnswerLost(t *testing.T) {
	p, direct, g, sid, effects := pgCutGateway(t)
	call := func(amount int) (*http.Response, string) {
		t.Helper()
		return g.post(t, "", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":%d,"customer":"cus_1"}}}`, amount, amount))
	}
	charge := func(amount int) string {
		t.Helper()
		resp, body := call(amount)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"result"`) || strings.Contains(body, `"isError":true`) {
			t.Fatalf("charge_card %d: %d %s; log:\n%s", amount, resp.StatusCode, body, g.logText())
		}
		return body
	}
	// A fresh call's round trips, the last its commit's: fresh calls until two in a row take
	// the same number (on a loaded machine a slow call, the session's first say, also renews
	// its lease: once it took 4 where the next took 2).
	trips := func(amount int) int64 {
		before := p.RoundTrips()
		charge(amount)
		return p.RoundTrips() - before
	}
	var n int64
	calls, seen := 0, []int64{}
	for calls < 8 {
		calls++
		n = trips(100 * calls)
		seen = append(seen, n)
		if len(seen) > 1 && seen[len(seen)-2] == n && n >= 2 {
			break
		}
	}
	if len(seen) < 2 || seen[len(seen)-2] != n || n < 2 {
		t.Fatalf("fresh calls took %v round trips: never the same twice in a row", seen)
	}
	// The round trip whose answer the proxy loses is the n-th of any connection: once in a
	// while another the gateway makes (its store's background recovery) comes between, and
	// the answer lost is not the commit's. Whether the call's commit landed is read past the
	// proxy as the answer is lost; a round in which it had not is run again with another call,
	// once that call has run (each call's effect runs once in any round).
	done := pgRecords(t, direct, "cert_hash IS NOT NULL")
	round := 1
	for ; ; round++ {
		amount := 10000 + 1000*round
		before := done()
		var after atomic.Int64
		p.LoseAnswerAnd(int(n), 400*time.Millisecond, func() { after.Store(done()) })
		_, first := call(amount)
		if p.Lost() != int64(round) {
			t.Fatalf("no answer was lost (%d round trips)", n)
		}
		if before < 0 || after.Load() < 0 {
			t.Fatalf("the ledger's records could not be counted past the proxy (%d before, %d as the answer was lost)", before, after.Load())
		}
		landed := after.Load() == before+1
		if landed && (!strings.Contains(first, "ch_") || strings.Contains(first, `"isError":true`)) {
			t.Fatalf("the call whose commit's answer was lost: %s; want the tool's answer; log:\n%s", first, g.logText())
		}
		var again string
		for deadline := time.Now().Add(30 * time.Second); ; {
			_, again = call(amount) // until the database is back, when the lost answer was not the commit's
			if strings.Contains(again, "ch_") || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !strings.Contains(again, "ch_") || effectsOf(t, effects) != calls+round {
			t.Fatalf("after the lost answer: %d effects for %d actions; the duplicate answered %s (the first %s)", effectsOf(t, effects), calls+round, again, first)
		}
		if landed {
			break
		}
		if round == 3 {
			t.Fatalf("in %d rounds the answer lost was never that of a commit that landed", round)
		}
		t.Logf("round %d: the answer lost was another round trip's (%d done records before, %d as it was lost); again", round, before, after.Load())
	}
	charge(20000) // its commit carries whatever counts wait in the gateway
	code, out, errOut := runCLI(t, "", "ledger", "stats", "--ledger", direct, "--json")
	var stats struct{ Counters fence.Counters }
	if code != exitOK || json.Unmarshal([]byte(out), &stats) != nil {
		t.Fatalf("ledger stats = %d %s %s", code, out, errOut)
	}
	admitted := uint64(calls + round + 1)
	if c := stats.Counters; c.Admitted != admitted || c.LeaseLost != 0 {
		t.Fatalf("ledger stats counts %+v for %d admissions and a replay; log:\n%s", c, admitted, g.logText())
	}
	// The gateway's /metrics shows the ledger's counts (and its own unflushed ones) alike.
	mresp, err := http.Get(strings.TrimSuffix(g.url, "/mcp") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{fmt.Sprintf(`effectfence_ledger_attempts_total{result="admitted"} %d`, admitted), `effectfence_ledger_attempts_total{result="lease_lost"} 0`} {
		if !strings.Contains(string(mb), want+"\n") {
			t.Fatalf("/metrics lacks %q:\n%s", want, mb)
		}
	}
	t.Logf("a fresh call: %d round trips (fresh calls took %v); stats %+v", n, seen, stats.Counters)
}

// pgThrough returns a proxy that mk makes in front of the test's PostgreSQL server, closed
// when the test ends, the URL of a new ledger (pgLedger) through it, and the same ledger's URL
// without it.
func pgThrough(t *testing.T, mk func(target string) (*netcut.Proxy, error)) (_ *netcut.Proxy, through *url.URL, direct string) {
	t.Helper()
	direct = pgLedger(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if _, _, err := net.SplitHostPort(target); err != nil {
		target = net.JoinHostPort(target, "5432")
	}
	p, err := mk(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	u.Host = p.Addr()
	return p, u, direct
}

// TestGatewayClaimAnswerLost: as above, but the answer lost is that of a fresh call's claim
// (its one statement landed), and the database stays away long enough that the gateway cannot
// ask whether it did: the call is refused as a ledger failure and not run. Once the database
// is back, the gateway releases the claim nobody holds a ticket for, and a retry runs the call
// once, and what the lost claim carried is counted once. Before, the claim stayed in flight
// until its lease lapsed, then unknown with its holder alive: every retry refused, and
// `ledger clear` refused without --force.
func TestGatewayClaimAnswerLost(t *testing.T) {
	p, direct, g, sid, effects := pgCutGateway(t)
	charge := func(id, amount int) string {
		t.Helper()
		resp, body := g.post(t, "", sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":%d,"customer":"cus_1"}}}`, id, amount))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("charge_card %d: %d %s; log:\n%s", amount, resp.StatusCode, body, g.logText())
		}
		return body
	}
	if b := charge(2, 100); !strings.Contains(b, "ch_") { // the pool and the server's clock are warm
		t.Fatalf("the first charge: %s", b)
	}
	// A replay, whose count waits in the gateway for its next write: the lost claim carries it.
	if b := charge(20, 100); !strings.Contains(b, "effectfence/replayed") {
		t.Fatalf("the duplicate of the first charge: %s", b)
	}
	// The round trip whose answer the proxy loses is the next one of any connection: once in a
	// while another the gateway makes (its store's background recovery) comes first, and the
	// claim is refused by the database's absence, never sent, which proves nothing of a claim
	// that landed. Whether the claim landed is read past the proxy as the answer is lost, and
	// a round in which it had not is run again with another call.
	records := pgRecords(t, direct, "true")
	id, round := 3, 1
	for ; ; round++ {
		amount := 300 * round
		before := records()
		var after atomic.Int64
		p.LoseAnswerAnd(1, 6*time.Second, func() { after.Store(records()) }) // longer than the store asks whether a lost claim landed
		lost := charge(id, amount)
		id++
		// The lost answer may also be a new connection's first round trip (the search_path
		// pin, or a connect): then the claim is never sent and the call is refused as a
		// ledger failure, "NOT executed", and the round is run again as below.
		if p.Lost() != int64(round) || !strings.Contains(lost, "not admitted") && !strings.Contains(lost, "the call was NOT executed") {
			t.Fatalf("the charge whose claim's answer was lost (%d lost): %s; log:\n%s", p.Lost(), lost, g.logText())
		}
		if n := effectsOf(t, effects); n != round {
			t.Fatalf("%d effects after a refused charge, want %d", n, round)
		}
		deadline := time.Now().Add(90 * time.Second)
		var again string
		for ; ; id++ {
			again = charge(id, amount)
			if strings.Contains(again, "ch_") || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		id++
		if !strings.Contains(again, "ch_") || effectsOf(t, effects) != round+1 {
			t.Fatalf("the retry once the database was back: %s (%d effects, want %d); log:\n%s", again, effectsOf(t, effects), round+1, g.logText())
		}
		if before < 0 || after.Load() < 0 {
			t.Fatalf("the ledger's records could not be counted past the proxy (%d before, %d as the answer was lost)", before, after.Load())
		}
		if after.Load() == before+1 {
			break // the lost answer was the claim's, which landed
		}
		if round == 6 {
			t.Fatalf("in %d rounds the answer lost was never that of a claim that landed", round)
		}
		t.Logf("round %d: the answer lost was another round trip's (%d records before, %d as it was lost); again", round, before, after.Load())
	}
	code, out, errOut := runCLI(t, "", "ledger", "stats", "--ledger", direct, "--json")
	var stats struct{ Counters fence.Counters }
	if code != exitOK || json.Unmarshal([]byte(out), &stats) != nil {
		t.Fatalf("ledger stats = %d %s %s", code, out, errOut)
	}
	// The refused call was not admitted (its claim, recorded or not, was never acted on).
	// The replay's count, which the lost claim carried, is counted once: the gateway releases
	// the claim only after the store has settled whether it landed (else, finding no claim, the
	// store took it for never recorded and added what it carried again).
	if c := stats.Counters; c.Admitted != uint64(1+round) || c.Replayed != 1 {
		t.Fatalf("ledger stats counts %+v for %d admissions (the first charge and each round's retry) and a replay; log:\n%s", c, 1+round, g.logText())
	}
}

// pgCutGateway starts the real binary as a gateway (wrap --listen, demo server writing its
// effects file) on a new PostgreSQL ledger reached through a NewPostgres proxy, and opens a
// session: the proxy, the ledger's URL without it, the gateway, the session and the effects
// file.
func pgCutGateway(t *testing.T) (p *netcut.Proxy, direct string, g *gatewayProc, sid, effects string) {
	t.Helper()
	p, u, direct := pgThrough(t, netcut.NewPostgres)
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	effects = filepath.Join(t.TempDir(), "effects")
	g = startGateway(t, "--ledger", u.String(), "--listen", "127.0.0.1:0",
		"--", effectfence(t), "demo-server", "--effects", effects)
	resp, body := g.post(t, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid = resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s; log:\n%s", resp.StatusCode, body, g.logText())
	}
	g.post(t, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return p, direct, g, sid, effects
}
