package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestSpeculativeClaim: once the store has read the server's clock, a fresh call's claim is
// one round trip on the wire (its commit stays one), and records what the transaction would:
// a claim whose token is the ticket's and larger than every token before it, stamped with a
// time no later than the server's clock, counted once, replayed to a duplicate. An intent
// that spells a pending token inside itself cannot take the token's place in the body.
func TestSpeculativeClaim(t *testing.T) {
	// Each try is a new schema and store: a statement that missed (its clock stale under
	// load) leaves counts and records this test does not expect.
	untilTheStatementLands(t, func(int) bool { return speculativeClaim(t) })
}

// speculativeClaim is one try of TestSpeculativeClaim: false when a one-statement claim
// wrote nothing because its clock was stale when the server ran it.
func speculativeClaim(t *testing.T) bool {
	schema := testSchema(t)
	var trips atomic.Int64
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, MaxConns: 1, wrapConn: func(c net.Conn) net.Conn {
		return &tripConn{Conn: c, trips: &trips}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := &stages{}
	s.hook = st.hook
	e := fence.New(s, fence.Config{})
	conn := admin(t, schema)
	req := func(intent string) fence.Request {
		return fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"amount":7}`)}
	}
	// The first claim reads the server's clock in a transaction; the connection prepares
	// each statement on its first use (a claim's statement comes in two: with the counters
	// of earlier calls folded in, and without).
	var last uint64
	for _, intent := range []string{"warm:1", "warm:2", "warm:3"} {
		adm, err := e.Prepare(ctx, req(intent))
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		if adm.Ticket.Token <= last {
			t.Fatalf("token %d after %d", adm.Ticket.Token, last)
		}
		last = adm.Ticket.Token
		if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
			t.Fatal(err)
		}
		if dup, err := e.Prepare(ctx, req(intent)); err != nil || dup.Fresh() {
			t.Fatal(dup, err)
		}
	}
	if st.count("claim speculation missed") > 0 {
		return false
	}
	if st.count("speculated claim") != 2 {
		t.Fatalf("stages: %v", st.n)
	}
	hostile := `x","token":9223372036854775807,"state":"done`
	for i, intent := range []string{"charge:1", hostile, "charge:3"} {
		before := serverNow(t, conn)
		t0 := trips.Load()
		adm, err := e.Prepare(ctx, req(intent))
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		t1 := trips.Load()
		if st.count("claim speculation missed") > 0 {
			return false
		}
		if t1-t0 != 1 || st.count("speculated claim") != 3+i {
			t.Fatalf("%q: claim in %d round trips; stages %v", intent, t1-t0, st.n)
		}
		tk := *adm.Ticket
		if tk.Token <= last || tk.Token == fence.PendingToken {
			t.Fatalf("%q: token %d after %d", intent, tk.Token, last)
		}
		last = tk.Token
		var body []byte
		var seq int64
		if err := conn.QueryRow(ctx, "SELECT body, (SELECT last_value FROM effectfence_token) FROM effectfence_records WHERE intent = $1", intent).Scan(&body, &seq); err != nil {
			t.Fatal(err)
		}
		if uint64(seq) != tk.Token {
			t.Fatalf("%q: the ticket's token %d is not the newest drawn, %d", intent, tk.Token, seq)
		}
		rec := &fence.Record{}
		if err := fence.DecodeRecord(body, rec); err != nil {
			t.Fatalf("%q: recorded body does not decode: %v\n%s", intent, err, body)
		}
		after := serverNow(t, conn)
		if rec.Intent != intent || rec.State != fence.StateInFlight || rec.Token != tk.Token || rec.Nonce != tk.Nonce ||
			!rec.LeaseUntil.Equal(tk.LeaseUntil) || rec.ClaimedAt.Before(before.Add(-specSlack)) || rec.ClaimedAt.After(after) {
			t.Fatalf("%q: recorded %+v (server clock %v .. %v), ticket %+v", intent, rec, before, after, tk)
		}
		if c, ok := s.claims.get(intent); !ok || !bytes.Equal(c.body, body) || (c.rec != nil && c.rec.Token != tk.Token) {
			t.Fatalf("%q: the claim cache holds %v %q, recorded %q", intent, ok, c.body, body)
		}
		cert, err := e.Commit(ctx, tk, []byte(`{"charge":"ch_1"}`))
		if err != nil {
			t.Fatal(err)
		}
		if trips.Load()-t1 != 1 {
			t.Fatalf("%q: commit in %d round trips", intent, trips.Load()-t1)
		}
		dup, err := e.Prepare(ctx, req(intent))
		if err != nil || dup.Fresh() || dup.Cert.Hash != cert.Hash {
			t.Fatalf("%q: duplicate %+v %v", intent, dup, err)
		}
	}
	if n := admitted(t, e); n != 6 {
		t.Fatalf("admitted %d, want 6", n)
	}
	if st.count("claim speculation missed") != 0 || st.count("claim speculation lost") != 0 {
		t.Fatalf("stages: %v", st.n)
	}
	return true
}

// TestSpeculativeClaimMisses: the one statement writes nothing, and the claim is decided by a
// transaction, when the intent has a record (another store's claim: refused in flight, that
// claim untouched) or when the clock the store reckons is ahead of the server's, or behind it
// by more than specSlack (claimed with the server's clock).
func TestSpeculativeClaimMisses(t *testing.T) {
	schema := testSchema(t)
	s, other := openSchema(t, schema), openSchema(t, schema)
	st := &stages{}
	s.hook = st.hook
	e, e2 := fence.New(s, fence.Config{}), fence.New(other, fence.Config{})
	conn := admin(t, schema)
	ctx := context.Background()
	r := func(intent string) fence.Request { return fence.Request{Intent: intent, Tool: "t"} }
	if adm, err := e.Prepare(ctx, r("warm")); err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	held, err := e2.Prepare(ctx, r("held"))
	if err != nil || !held.Fresh() {
		t.Fatal(held, err)
	}
	var before []byte
	if err := conn.QueryRow(ctx, "SELECT body FROM effectfence_records WHERE intent = 'held'").Scan(&before); err != nil {
		t.Fatal(err)
	}
	adm, err := e.Prepare(ctx, r("held"))
	if fence.CodeOf(err) != fence.CodeInFlight || st.count("claim speculation missed") != 1 || st.count("speculated claim") != 0 {
		t.Fatalf("a claim of an intent in flight elsewhere: %+v %v; stages %v", adm, err, st.n)
	}
	var after []byte
	if err := conn.QueryRow(ctx, "SELECT body FROM effectfence_records WHERE intent = 'held'").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("the other store's claim changed:\n%s\n%s", before, after)
	}
	for i, skew := range []time.Duration{time.Second, -specSlack - 50*time.Millisecond} {
		intent := []string{"clock:ahead", "clock:behind"}[i]
		c := s.clock.Load()
		s.clock.Store(&clockReading{c.now.Add(skew), c.at})
		begin := serverNow(t, conn)
		adm, err := e.Prepare(ctx, r(intent))
		end := serverNow(t, conn)
		if err != nil || !adm.Fresh() || st.count("claim speculation missed") != 2+i || st.count("speculated claim") != 0 {
			t.Fatalf("%s: %+v %v; stages %v", intent, adm, err, st.n)
		}
		rec, err := e.Status(ctx, intent)
		if err != nil || rec.Token != adm.Ticket.Token || rec.ClaimedAt.Before(begin) || rec.ClaimedAt.After(end) {
			t.Fatalf("%s: recorded %+v %v; want claimed at the server's time, between %v and %v", intent, rec, err, begin, end)
		}
	}
	if n := admitted(t, e); n != 3 {
		t.Fatalf("admitted %d, want 3", n)
	}
}

// TestSpeculativeClaimAcknowledgementLost: the connection is cut once the claim's batch is
// sent whole and the server has run it. The store finds the claim recorded (its body around
// the token is this claim's) and admits with its token: the call runs once, its commit lands,
// a duplicate replays, and the admission is counted once.
func TestSpeculativeClaimAcknowledgementLost(t *testing.T) {
	schema := testSchema(t)
	var armed atomic.Bool
	var cut atomic.Int64
	ctx := context.Background()
	watch := newBackendWatch(t)
	s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, wrapConn: func(c net.Conn) net.Conn {
		return newCutConn(c, &armed, &cut, watch)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn := admin(t, schema)
	count := witness(t, conn)
	st := &stages{on: func(stage string, _ uint32) {
		if stage == "speculate claim" {
			armed.Store(true)
		}
	}}
	s.hook = st.hook
	e := fence.New(s, fence.Config{})
	if _, err := attempt(ctx, e, conn, fence.Request{Intent: "warm", Tool: "charge"}, "warm"); err != nil {
		t.Fatal(err)
	}
	// A try whose statement wrote nothing (its clock guard, specSlack, missed: on a loaded
	// machine the batch can reach the server more than 100 ms after the clock it carries)
	// is claimed by the transaction path, rightly; the test then tries again with another
	// intent, up to three times, and requires the claim that landed.
	var r fence.Request
	var tk *fence.Ticket
	try := 0
	for ; ; try++ {
		r = fence.Request{Intent: fmt.Sprintf("charge:claim-lost-ack-%d", try), Tool: "charge", Args: []byte(`{"amount":3}`)}
		cuts, lost, landed, never := cut.Load(), st.count("claim speculation lost"), st.count("claim speculation landed"), st.count("claim speculation never landed")
		tk, err = attempt(ctx, e, conn, r, "holder")
		if err != nil || tk == nil {
			t.Fatalf("a claim whose answer was lost: %v %v; stages %v", tk, err, st.n)
		}
		if cut.Load()-cuts == 1 && st.count("claim speculation lost")-lost == 1 && st.count("claim speculation landed")-landed == 1 {
			break
		}
		if try < 2 && cut.Load()-cuts == 1 && st.count("claim speculation never landed")-never == 1 {
			t.Logf("try %d: the speculative claim wrote nothing (its clock guard); stages %v", try, st.n)
			continue
		}
		t.Fatalf("cut %d connections; stages %v", cut.Load(), st.n)
	}
	rec, err := e.Status(ctx, r.Intent)
	if err != nil || rec.State != fence.StateInFlight || rec.Token != tk.Token || rec.Nonce != tk.Nonce {
		t.Fatalf("recorded %+v %v, ticket %+v", rec, err, tk)
	}
	cert, err := e.Commit(ctx, *tk, []byte(`"charged"`))
	if err != nil {
		t.Fatal(err)
	}
	replaysOnce(t, e, r, cert, count)
	if n, want := admitted(t, e), uint64(2+try); n != want { // the warm-up and one per try
		t.Fatalf("admitted %d, want %d", n, want)
	}
}

// TestLateSpeculativeClaimIsFenced: the claim's batch is held up on its way, so its answer is
// lost. The store waits, holding the intent's lock, until the server's clock is past the
// claim's clock plus specSlack, finds nothing recorded, and claims in a transaction. The held
// batch, reaching the server right after the wait (before the transaction) and again after
// it, writes nothing and draws no token: the call is admitted once, with the transaction's
// claim.
func TestLateSpeculativeClaimIsFenced(t *testing.T) {
	for _, when := range []string{"before the transaction", "after it"} {
		t.Run(when, func(t *testing.T) {
			schema := testSchema(t)
			var armed atomic.Bool
			var late *lateConn
			var cancels cancelWatch
			ctx := context.Background()
			s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, wrapConn: func(c net.Conn) net.Conn {
				return &lateConn{Conn: c, armed: &armed, late: &late, cancels: &cancels}
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			conn := admin(t, schema)
			var codes, tags []string
			var derr error
			var seqBefore, seqAfter int64
			deliver := func() {
				if err := conn.QueryRow(ctx, "SELECT last_value FROM effectfence_token").Scan(&seqBefore); err != nil {
					t.Error(err)
				}
				codes, tags, derr = late.deliver()
				if err := conn.QueryRow(ctx, "SELECT last_value FROM effectfence_token").Scan(&seqAfter); err != nil {
					t.Error(err)
				}
			}
			st := &stages{on: func(stage string, _ uint32) {
				switch {
				case stage == "speculate claim":
					armed.Store(true)
				case stage == "claim speculation never landed" && when == "before the transaction":
					deliver()
				}
			}}
			s.hook = st.hook
			e := fence.New(s, fence.Config{})
			if adm, err := e.Prepare(ctx, fence.Request{Intent: "warm", Tool: "t"}); err != nil || !adm.Fresh() {
				t.Fatal(adm, err)
			}
			r := fence.Request{Intent: "charge:claim-late", Tool: "charge", Args: []byte(`{"amount":5}`)}
			adm, err := e.Prepare(ctx, r)
			if err != nil || !adm.Fresh() {
				t.Fatalf("%+v %v; stages %v", adm, err, st.n)
			}
			if late == nil || st.count("claim speculation lost") != 1 || st.count("claim speculation never landed") != 1 || st.count("claim speculation landed") != 0 {
				t.Fatalf("held %v; stages %v", late != nil, st.n)
			}
			var before []byte
			if err := conn.QueryRow(ctx, "SELECT body FROM effectfence_records WHERE intent = $1", r.Intent).Scan(&before); err != nil {
				t.Fatal(err)
			}
			if when == "after it" {
				deliver()
			}
			// The batch's statements: the lock (one row), then the claim's write, which
			// answers one row (no token drawn, the server's clock).
			if derr != nil || len(codes) != 0 || !slices.Equal(tags, []string{"SELECT 1", "SELECT 1"}) || seqAfter != seqBefore {
				t.Fatalf("the late batch was answered with errors %v, command tags %q, %v; the token sequence went from %d to %d", codes, tags, derr, seqBefore, seqAfter)
			}
			var after []byte
			if err := conn.QueryRow(ctx, "SELECT body FROM effectfence_records WHERE intent = $1", r.Intent).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Fatalf("the late batch changed the record:\n%s\n%s", before, after)
			}
			rec, err := e.Status(ctx, r.Intent)
			if err != nil || rec.State != fence.StateInFlight || rec.Token != adm.Ticket.Token || rec.Nonce != adm.Ticket.Nonce {
				t.Fatalf("recorded %+v %v, ticket %+v", rec, err, adm.Ticket)
			}
			if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"charged"`)); err != nil {
				t.Fatal(err)
			}
			if n := admitted(t, e); n != 2 {
				t.Fatalf("admitted %d, want 2", n)
			}
		})
	}
}

// downLate is a lateConn after whose hold every connection fails while down is set.
type downLate struct {
	*lateConn
	down *atomic.Bool
}

func (c downLate) Read(b []byte) (int, error) {
	if c.down.Load() {
		return 0, errSevered
	}
	return c.lateConn.Read(b)
}

func (c downLate) Write(b []byte) (int, error) {
	if c.down.Load() {
		return 0, errSevered
	}
	before := c.cut.Load()
	n, err := c.lateConn.Write(b)
	if !before && c.cut.Load() { // this write was held: the database goes away with it
		c.down.Store(true)
	}
	return n, err
}

// TestSpeculativeClaimOutcomeUnknown: the claim's answer is lost and the database cannot be
// reached to settle it: Prepare fails with CommitUnknownError (store_error), and runs nothing.
// The counters its batch carried are the store's to settle once the database is back: counted
// once whether the claim was recorded (the server ran the batch before the cut; the engine,
// which refused the call, releases that claim once the store has settled its doubt, and a
// duplicate is then admitted) or not (the batch never arrived; a duplicate is admitted).
func TestSpeculativeClaimOutcomeUnknown(t *testing.T) {
	for _, recorded := range []bool{true, false} {
		t.Run(map[bool]string{true: "recorded", false: "not recorded"}[recorded], func(t *testing.T) {
			untilTheStatementLands(t, func(try int) bool {
				schema := testSchema(t)
				var armed, down atomic.Bool
				var cut atomic.Int64
				var late *lateConn
				ctx := context.Background()
				watch := newBackendWatch(t)
				s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, MaxConns: 4, wrapConn: func(c net.Conn) net.Conn {
					if recorded {
						return downConn{cutConn: newCutConn(c, &armed, &cut, watch), down: &down}
					}
					return downLate{&lateConn{Conn: c, armed: &armed, late: &late}, &down}
				}})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				var arm atomic.Bool // the claim of r only
				st := &stages{on: func(stage string, _ uint32) {
					if stage == "speculate claim" && arm.CompareAndSwap(true, false) {
						armed.Store(true)
					}
				}}
				s.hook = st.hook
				e := fence.New(s, fence.Config{})
				if adm, err := e.Prepare(ctx, fence.Request{Intent: "warm", Tool: "t"}); err != nil || !adm.Fresh() {
					t.Fatal(adm, err)
				}
				arm.Store(true)
				r := fence.Request{Intent: fmt.Sprintf("charge:claim-unknown-%d", try), Tool: "charge", Args: []byte(`{"amount":4}`)}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				adm, err := e.Prepare(cctx, r)
				var unknown CommitUnknownError
				if !errors.As(err, &unknown) || !unknown.CountersKept() || fence.CodeOf(err) != fence.CodeStore || adm.Ticket != nil ||
					!strings.Contains(err.Error(), "one-statement claim") || !strings.Contains(err.Error(), "must not run") {
					t.Fatalf("a claim with the database gone: %+v %v", adm, err)
				}
				if st.count("claim speculation lost") != 1 || st.count("speculated claim") != 0 {
					t.Fatalf("stages %v", st.n)
				}
				t.Logf("prepare: %v", err)
				if recorded && recordState(t, admin(t, schema), r.Intent) == "" {
					// The server answered the statement (the cut waits for that) and it wrote
					// nothing: its clock was stale (untilTheStatementLands).
					down.Store(false)
					return false
				}
				down.Store(false)
				if late != nil {
					late.Conn.Close() // the batch never arrives
				}
				// A claim not recorded may be yet until the server's clock is past its own plus
				// specSlack: the doubt stays open until then.
				for deadline := time.Now().Add(10 * time.Second); s.doubts.n.Load() > 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					s.settleDoubts(ctx, true)
				}
				if adm, err := e.Prepare(ctx, fence.Request{Intent: "next", Tool: "t"}); err != nil || !adm.Fresh() {
					t.Fatalf("%+v %v; stages %v", adm, err, st.n)
				}
				want := map[bool]string{true: "doubt landed", false: "doubt added"}[recorded]
				if st.count(want) != 1 || st.count("doubt landed")+st.count("doubt added") != 1 {
					t.Fatalf("stages %v, want %q", st.n, want)
				}
				if n := admitted(t, e); n != 2 {
					t.Fatalf("admitted %d, want 2 (warm, next)", n)
				}
				dup, err := e.Prepare(ctx, r)
				for deadline := time.Now().Add(30 * time.Second); recorded && fence.CodeOf(err) == fence.CodeInFlight && time.Now().Before(deadline); {
					time.Sleep(20 * time.Millisecond) // the engine releases the recorded claim
					dup, err = e.Prepare(ctx, r)
				}
				if err != nil || !dup.Fresh() {
					t.Fatalf("a duplicate of the claim (recorded: %v): %+v %v", recorded, dup, err)
				}
				if n := admitted(t, e); n != 3 {
					t.Fatalf("admitted %d, want 3 (warm, next, the duplicate)", n)
				}
				return true
			})
		})
	}
}
