package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
)

// stages counts the stages a store's hook reports, and passes them on to on, if set.
type stages struct {
	mu sync.Mutex
	n  map[string]int
	on func(stage string, pid uint32)
}

func (s *stages) hook(stage string, pid uint32) {
	s.mu.Lock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[stage]++
	on := s.on
	s.mu.Unlock()
	if on != nil {
		on(stage, pid)
	}
}

func (s *stages) count(stage string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[stage]
}

// msgReader follows the server's side of a connection, message by message (a type byte and a
// length; the connection must not use TLS).
type msgReader struct {
	head [5]byte
	have int
	skip int
}

func (m *msgReader) feed(b []byte, onType func(byte)) {
	for len(b) > 0 {
		if m.skip > 0 {
			k := min(m.skip, len(b))
			m.skip, b = m.skip-k, b[k:]
			continue
		}
		k := copy(m.head[m.have:], b)
		m.have, b = m.have+k, b[k:]
		if m.have == len(m.head) {
			onType(m.head[0])
			m.skip, m.have = int(binary.BigEndian.Uint32(m.head[1:]))-4, 0
		}
	}
}

// tripConn counts round trips: the server ends the answer to every Sync (and every simple
// query) with one ReadyForQuery message.
type tripConn struct {
	net.Conn
	trips *atomic.Int64
	m     msgReader
}

func (c *tripConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.m.feed(b[:n], func(typ byte) {
		if typ == 'Z' {
			c.trips.Add(1)
		}
	})
	return n, err
}

func serverNow(t *testing.T, conn *pgx.Conn) time.Time {
	t.Helper()
	var now time.Time
	if err := conn.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

func admitted(t *testing.T, e *fence.Engine) uint64 {
	t.Helper()
	ctx := context.Background()
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stats, err := e.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stats.Ledger.Admitted
}

// TestSpeculativeCommit: the commit of a claim this store wrote is one round trip on the wire
// (the claim stays two), and records what the transaction would: the done record, its cert
// (replayed to a duplicate), the counters, a time between the claim's and the server's clock.
// A heartbeat in between is a transaction whose claim the commit then uses; a commit that must
// re-read a read-set domain does not try one statement at all.
func TestSpeculativeCommit(t *testing.T) {
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
	admin := admin(t, schema)
	req := func(intent string) fence.Request {
		return fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"amount":7}`), Domain: "acct"}
	}

	// The connection prepares each statement on its first use: warm it up.
	for _, intent := range []string{"warm:1", "warm:2"} {
		adm, err := e.Prepare(ctx, req(intent))
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
			t.Fatal(err)
		}
	}
	t0 := trips.Load()
	adm, err := e.Prepare(ctx, req("charge:1"))
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	t1 := trips.Load()
	cert, err := e.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`))
	if err != nil {
		t.Fatal(err)
	}
	t2 := trips.Load()
	if t1-t0 != 2 || t2-t1 != 1 {
		t.Fatalf("round trips: claim %d, commit %d; want 2 and 1", t1-t0, t2-t1)
	}
	if st.count("speculated") != 3 || st.count("speculation missed") != 0 || st.count("speculation lost") != 0 {
		t.Fatalf("stages: %v", st.n)
	}
	rec, err := e.Status(ctx, "charge:1")
	if err != nil || rec.State != fence.StateDone || rec.Token != adm.Ticket.Token || rec.Cert == nil || rec.Cert.Hash != cert.Hash {
		t.Fatalf("recorded: %+v %v", rec, err)
	}
	if now := serverNow(t, admin); rec.UpdatedAt.Before(rec.ClaimedAt) || rec.UpdatedAt.After(now) {
		t.Fatalf("the commit's time %v is not between the claim's %v and the server's clock after it %v", rec.UpdatedAt, rec.ClaimedAt, now)
	}
	if !rec.ExpiresAt.Equal(rec.UpdatedAt.Add(fence.DefaultResultTTL)) {
		t.Fatalf("expires at %v, want the commit's time %v + the result TTL", rec.ExpiresAt, rec.UpdatedAt)
	}
	dup, err := e.Prepare(ctx, req("charge:1"))
	if err != nil || dup.Fresh() || dup.Cert.Hash != cert.Hash || string(dup.Cert.Result) != `{"charge":"ch_1"}` {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
	if n := admitted(t, e); n != 3 {
		t.Fatalf("admitted %d, want 3", n)
	}

	// A heartbeat is a transaction; the commit after it uses the claim the heartbeat wrote.
	adm, err = e.Prepare(ctx, req("charge:2"))
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	begun := st.count("begin")
	tk, err := e.Heartbeat(ctx, *adm.Ticket)
	if err != nil {
		t.Fatal(err)
	}
	if st.count("begin") != begun+1 || st.count("speculate") != 3 {
		t.Fatalf("the heartbeat was not one transaction: %v", st.n)
	}
	if _, err := e.Commit(ctx, tk, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	if st.count("speculated") != 4 {
		t.Fatalf("the commit after a heartbeat did not use its claim: %v", st.n)
	}
	rec, err = e.Status(ctx, "charge:2")
	if err != nil || rec.State != fence.StateDone || !rec.LeaseUntil.Equal(tk.LeaseUntil) {
		t.Fatalf("recorded: %+v %v", rec, err)
	}

	// A read set must be re-read at commit: a transaction, without a statement tried first.
	r := req("charge:3")
	r.ReadSet = []fence.ReadSetEntry{{Domain: "book", Seq: 0}}
	adm, err = e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	begun = st.count("begin")
	if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	if st.count("speculate") != 4 || st.count("begin") != begun+1 {
		t.Fatalf("a commit with a read set: %v", st.n)
	}
}

// TestSpeculativeCommitClockGuard: the clock a one-statement commit stamps is the claim's
// server clock plus local elapsed time, and the statement checks it against the server's
// clock under the intent's lock. Skewed ahead, or lagging by more than specSlack, it misses,
// and the transaction commits with the server's clock.
func TestSpeculativeCommitClockGuard(t *testing.T) {
	s := newTestStore(t)
	st := &stages{}
	s.hook = st.hook
	e := fence.New(s, fence.Config{})
	admin := admin(t, s.Schema())
	ctx := context.Background()
	for i, skew := range []time.Duration{time.Second, -specSlack - 50*time.Millisecond} {
		intent := []string{"clock:ahead", "clock:behind"}[i]
		adm, err := e.Prepare(ctx, fence.Request{Intent: intent, Tool: "t"})
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		c, ok := s.claims.get(intent)
		if !ok {
			t.Fatalf("%s: the claim was not remembered", intent)
		}
		c.now = c.now.Add(skew)
		s.claims.put(intent, c)
		before := serverNow(t, admin)
		if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
			t.Fatal(err)
		}
		after := serverNow(t, admin)
		if st.count("speculation missed") != i+1 || st.count("speculated") != 0 {
			t.Fatalf("%s: stages %v", intent, st.n)
		}
		rec, err := e.Status(ctx, intent)
		if err != nil || rec.State != fence.StateDone || rec.UpdatedAt.Before(before) || rec.UpdatedAt.After(after) {
			t.Fatalf("%s: recorded %+v %v; want done at the server's time, between %v and %v", intent, rec, err, before, after)
		}
	}
}

// TestSpeculativeCommitMissesWhenTheClaimChanged: another store (its own connections, its own
// memory) changes the record between this store's claim and its commit. The one statement
// finds the record no longer the claim it wrote and changes nothing; the commit runs as a
// transaction and decides on what is recorded: a claim taken over refuses the late commit
// (lease_lost) and keeps the new holder's outcome; a claim marked unknown is healed.
func TestSpeculativeCommitMissesWhenTheClaimChanged(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	sa, sb := openSized(t, schema, 2), openSized(t, schema, 2)
	sta, stb := &stages{}, &stages{}
	sa.hook, sb.hook = sta.hook, stb.hook
	a := fence.New(sa, fence.Config{LeaseTTL: lease, Owner: "host-a/1/1"})
	b := fence.New(sb, fence.Config{LeaseTTL: lease, Owner: "host-b/1/1"})

	// Taken over: B's outcome stands.
	r := fence.Request{Intent: "payout:1", Tool: "payout", Args: []byte(`{"usd":1}`), RerunSafe: true}
	admA, err := a.Prepare(ctx, r)
	if err != nil || !admA.Fresh() {
		t.Fatal(admA, err)
	}
	time.Sleep(2 * lease)
	admB, err := b.Prepare(ctx, r)
	if err != nil || !admB.Fresh() || !admB.Ticket.Reclaimed {
		t.Fatalf("takeover: %+v %v", admB, err)
	}
	certB, err := b.Commit(ctx, *admB.Ticket, []byte(`{"paid_by":"B"}`))
	if err != nil {
		t.Fatal(err)
	}
	if stb.count("speculated") != 1 {
		t.Fatalf("B's commit: %v", stb.n)
	}
	if _, err := a.Commit(ctx, *admA.Ticket, []byte(`{"paid_by":"A"}`)); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("A's late commit: %v", err)
	}
	if sta.count("speculation missed") != 1 || sta.count("speculated") != 0 {
		t.Fatalf("A's commit: %v", sta.n)
	}
	rec, err := a.Status(ctx, r.Intent)
	if err != nil || rec.State != fence.StateDone || rec.Cert.Hash != certB.Hash || string(rec.Cert.Result) != `{"paid_by":"B"}` {
		t.Fatalf("recorded: %+v %v", rec, err)
	}

	// Marked unknown by B: A's late commit heals it.
	r = fence.Request{Intent: "payout:2", Tool: "payout", Args: []byte(`{"usd":2}`)}
	admA, err = a.Prepare(ctx, r)
	if err != nil || !admA.Fresh() {
		t.Fatal(admA, err)
	}
	time.Sleep(2 * lease)
	var pf fence.PriorFailureError
	if _, err := b.Prepare(ctx, r); !errors.As(err, &pf) || pf.State != fence.StateUnknown {
		t.Fatalf("B after A's lease: %v", err)
	}
	certA, err := a.Commit(ctx, *admA.Ticket, []byte(`{"paid_by":"A"}`))
	if err != nil {
		t.Fatal(err)
	}
	if sta.count("speculation missed") != 2 || sta.count("speculated") != 0 {
		t.Fatalf("A's commit: %v", sta.n)
	}
	rec, err = b.Status(ctx, r.Intent)
	if err != nil || rec.State != fence.StateDone || rec.Cert.Hash != certA.Hash {
		t.Fatalf("recorded: %+v %v", rec, err)
	}
	healed := false
	if err := sb.View(ctx, func(tx fence.Tx) error {
		return tx.Events(r.Intent, func(ev fence.Event) bool {
			healed = healed || ev.Kind == fence.EventHeal
			return true
		})
	}); err != nil || !healed {
		t.Fatalf("no heal event: %v", err)
	}
}

// TestSpeculativeCommitAcknowledgementLost: the one statement reaches the server and commits,
// but its answer is lost. The commit runs as a transaction, finds the done record the
// statement wrote, and answers with its cert; the counters the statement carried are not
// added again.
func TestSpeculativeCommitAcknowledgementLost(t *testing.T) {
	untilTheStatementLands(t, func(try int) bool {
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
		st := &stages{}
		r := fence.Request{Intent: fmt.Sprintf("charge:spec-lost-ack-%d", try), Tool: "charge", Args: []byte(`{"amount":3}`)}
		landed := true
		st.on = func(stage string, _ uint32) {
			switch stage {
			case "speculate":
				armed.Store(true)
			case "speculation lost":
				// The server has answered the statement (the cut waits for that), so it
				// wrote the done record or nothing.
				landed = recordState(t, conn, r.Intent) == fence.StateDone
			}
		}
		s.hook = st.hook
		e := fence.New(s, fence.Config{})
		tk, err := attempt(ctx, e, conn, r, "holder")
		if err != nil || tk == nil {
			t.Fatal(tk, err)
		}
		cert, err := e.Commit(ctx, *tk, []byte(`"charged"`))
		if err != nil {
			t.Fatalf("commit with a lost answer: %v", err)
		}
		if !landed {
			// Then the transaction wrote it, as it must.
			if st.count("landed") != 0 {
				t.Fatalf("the statement wrote nothing, yet the transaction found it landed: stages %v", st.n)
			}
			replaysOnce(t, e, r, cert, count)
			return false
		}
		if cut.Load() != 1 || st.count("speculation lost") != 1 || st.count("landed") != 1 {
			t.Fatalf("cut %d connections; stages %v", cut.Load(), st.n)
		}
		replaysOnce(t, e, r, cert, count)
		if n := admitted(t, e); n != 1 {
			t.Fatalf("admitted %d, want 1", n)
		}
		return true
	})
}

// untilTheStatementLands runs try (0, 1, …) until it returns true: its one-statement commit
// wrote the record, the premise of the test. The statement checks that the clock it carries
// is at most specSlack (100 ms) old when the server runs it, and writes nothing otherwise; a
// stall of the loaded machine between the store's reading of the clock and the statement
// (the cut's backend watch runs a query there) makes it write nothing, and the commit goes
// the transaction's way, correctly but without testing what the test is about. Five stale
// statements in a row fail the test: then the statement does not land for another reason.
func untilTheStatementLands(t *testing.T, try func(int) bool) {
	t.Helper()
	for i := range 5 {
		if try(i) {
			return
		}
		t.Logf("try %d: the statement's clock was stale when the server ran it (it wrote nothing); again", i)
	}
	t.Fatal("in 5 tries the one statement never wrote its record")
}

// recordState reads intent's state from the server on conn ("" when it has no record).
func recordState(t *testing.T, conn *pgx.Conn, intent string) fence.State {
	t.Helper()
	var state string
	err := conn.QueryRow(context.Background(), "SELECT state FROM effectfence_records WHERE intent = $1", intent).Scan(&state)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Error(err)
	}
	return fence.State(state)
}

// TestSpeculativeCommitBackendTerminated: the backend is terminated just before the statement
// is sent. Nothing of it ran; the commit runs as a transaction on a new connection.
func TestSpeculativeCommitBackendTerminated(t *testing.T) {
	schema := testSchema(t)
	s := openSchema(t, schema)
	conn := admin(t, schema)
	count := witness(t, conn)
	k := &killer{t: t, admin: admin(t, "")}
	st := &stages{on: k.hook}
	s.hook = st.hook
	e := fence.New(s, fence.Config{})
	ctx := context.Background()
	r := fence.Request{Intent: "charge:spec-kill", Tool: "charge", Args: []byte(`{"amount":2}`), Domain: "acct"}
	tk, err := attempt(ctx, e, conn, r, "holder")
	if err != nil || tk == nil {
		t.Fatal(tk, err)
	}
	k.arm("speculate")
	cert, err := e.Commit(ctx, *tk, []byte(`{"charge":"ch_1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if k.killed.Load() != 1 || st.count("speculated") != 0 || st.count("speculation lost")+st.count("speculation missed") != 1 || st.count("landed") != 0 {
		t.Fatalf("killed %d; stages %v", k.killed.Load(), st.n)
	}
	replaysOnce(t, e, r, cert, count)
	if n := admitted(t, e); n != 1 {
		t.Fatalf("admitted %d, want 1", n)
	}
}

// TestSpeculativeCommitOutcomeUnknown: the statement's answer is lost and the database cannot
// be reached to settle it: CommitUnknownError (code store_error). Once the database is back,
// the commit is found recorded.
func TestSpeculativeCommitOutcomeUnknown(t *testing.T) {
	untilTheStatementLands(t, func(try int) bool {
		schema := testSchema(t)
		var armed, down atomic.Bool
		var cut atomic.Int64
		ctx := context.Background()
		watch := newBackendWatch(t)
		s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, MaxConns: 4, wrapConn: func(c net.Conn) net.Conn {
			return downConn{cutConn: newCutConn(c, &armed, &cut, watch), down: &down}
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		conn := admin(t, schema)
		r := fence.Request{Intent: fmt.Sprintf("charge:spec-unknown-%d", try), Tool: "charge", Args: []byte(`{"amount":4}`)}
		landed := true
		st := &stages{on: func(stage string, _ uint32) {
			switch stage {
			case "speculate":
				armed.Store(true)
			case "speculation lost":
				landed = recordState(t, conn, r.Intent) == fence.StateDone // answered: see AcknowledgementLost
			}
		}}
		s.hook = st.hook
		e := fence.New(s, fence.Config{})
		adm, err := e.Prepare(ctx, r)
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = e.Commit(cctx, *adm.Ticket, []byte(`"charged"`))
		var unknown CommitUnknownError
		if !errors.As(err, &unknown) || fence.CodeOf(err) != fence.CodeStore || !strings.Contains(err.Error(), "may or may not be recorded") {
			t.Fatalf("commit with the database gone: %v", err)
		}
		if st.count("speculation lost") != 1 {
			t.Fatalf("stages %v", st.n)
		}
		t.Logf("commit: %v", err)
		down.Store(false)
		if !landed {
			return false
		}
		rec, err := e.Status(ctx, r.Intent)
		if err != nil || rec.State != fence.StateDone || rec.Token != adm.Ticket.Token {
			t.Fatalf("after the database is back: %+v %v", rec, err)
		}
		again, err := e.Prepare(ctx, r)
		if err != nil || again.Fresh() || string(again.Cert.Result) != `"charged"` {
			t.Fatalf("duplicate: %+v %v", again, err)
		}
		return true
	})
}

// lateConn, once armed, holds back the next write that executes statements: pgx is told it
// was sent, but every read fails from then on, so pgx gives the connection up. The test sends
// the held bytes later (deliver), on the same server connection, as a statement delayed in
// the network would arrive.
type lateConn struct {
	net.Conn
	armed  *atomic.Bool
	late   **lateConn // set to the connection holding a batch
	held   []byte
	cut    atomic.Bool
	inRead atomic.Int64
	// cancels, when set, counts the cancel requests sent on connections so wrapped (see
	// cancelWatch); cancel says this connection carries one.
	cancels *cancelWatch
	cancel  bool
}

// cancelWatch counts the cancel requests pgx sends, each on a connection of its own, as it
// gives a connection up (pgconn's asyncClose), and those whose connection the server has
// closed: the server has then signalled the backend. A cancel that reaches the backend
// after deliver has sent the held statement cancels it (57014, CI under load), and then the
// statement's own guard is not what stopped it; deliver waits for them first.
type cancelWatch struct{ sent, acked atomic.Int64 }

// cancelCode starts a CancelRequest, after its length.
const cancelCode = 80877102

func (c *lateConn) Read(b []byte) (int, error) {
	c.inRead.Add(1)
	defer c.inRead.Add(-1)
	if c.cut.Load() {
		return 0, errSevered
	}
	n, err := c.Conn.Read(b)
	if c.cut.Load() {
		return 0, errSevered
	}
	return n, err
}

func (c *lateConn) Write(b []byte) (int, error) {
	if c.cut.Load() {
		return 0, errSevered
	}
	if c.cancels != nil && len(b) >= 8 && binary.BigEndian.Uint32(b[4:8]) == cancelCode {
		c.cancel = true
		c.cancels.sent.Add(1)
	}
	if !executes(b) || !c.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(b)
	}
	c.held = bytes.Clone(b)
	c.cut.Store(true)
	_ = c.Conn.SetReadDeadline(time.Now()) // a read under way returns now
	*c.late = c
	return len(b), nil
}

func (c *lateConn) Close() error {
	if c.cut.Load() {
		return nil // deliver closes it
	}
	if c.cancel {
		c.cancel = false
		c.cancels.acked.Add(1)
	}
	return c.Conn.Close()
}

// deliver sends the held bytes to the server and returns the SQLSTATEs of the errors it
// answers with and the command tag of each statement it completed, up to its ReadyForQuery.
func (c *lateConn) deliver() (codes, tags []string, err error) {
	defer c.Conn.Close()
	for c.inRead.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	if c.cancels != nil {
		// pgx gave the connection up when its read failed, and cancels what it runs from
		// another goroutine: wait until that cancel has reached the server (or, should pgx
		// send none, for a while).
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if sent := c.cancels.sent.Load(); sent > 0 && c.cancels.acked.Load() == sent {
				break
			}
		}
	}
	if err := c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, nil, err
	}
	if _, err := c.Conn.Write(c.held); err != nil {
		return nil, nil, err
	}
	for {
		head := make([]byte, 5)
		if _, err := io.ReadFull(c.Conn, head); err != nil {
			return codes, tags, err
		}
		body := make([]byte, int(binary.BigEndian.Uint32(head[1:]))-4)
		if _, err := io.ReadFull(c.Conn, body); err != nil {
			return codes, tags, err
		}
		switch head[0] {
		case 'C': // CommandComplete: the tag, NUL-terminated
			tags = append(tags, string(bytes.TrimRight(body, "\x00")))
		case 'E': // fields: a type byte and a NUL-terminated string each, then a NUL
			for len(body) > 1 {
				end := bytes.IndexByte(body[1:], 0) + 1
				if body[0] == 'C' {
					codes = append(codes, string(body[1:end]))
				}
				body = body[end+1:]
			}
		case 'Z':
			return codes, tags, nil
		}
	}
}

// TestLateSpeculativeCommitIsFenced: the statement's answer is lost because the statement
// itself is held up on its way; the commit runs as a transaction and records the outcome.
// When the statement finally reaches the server it finds the record no longer the claim it
// requires, and writes nothing: the recorded outcome, its time and the counters stay the
// transaction's.
func TestLateSpeculativeCommitIsFenced(t *testing.T) {
	schema := testSchema(t)
	var armed atomic.Bool
	var cancels cancelWatch
	var late *lateConn
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, wrapConn: func(c net.Conn) net.Conn {
		return &lateConn{Conn: c, armed: &armed, late: &late, cancels: &cancels}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := &stages{on: func(stage string, _ uint32) {
		if stage == "speculate" {
			armed.Store(true)
		}
	}}
	s.hook = st.hook
	conn := admin(t, schema)
	e := fence.New(s, fence.Config{})
	r := fence.Request{Intent: "charge:spec-late", Tool: "charge", Args: []byte(`{"amount":5}`)}
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	cert, err := e.Commit(ctx, *adm.Ticket, []byte(`"charged"`))
	if err != nil {
		t.Fatal(err)
	}
	if late == nil || st.count("speculation lost") != 1 || st.count("landed") != 0 {
		t.Fatalf("held %v; stages %v", late != nil, st.n)
	}
	var before []byte
	if err := conn.QueryRow(ctx, "SELECT body FROM effectfence_records WHERE intent = $1", r.Intent).Scan(&before); err != nil {
		t.Fatal(err)
	}
	codes, tags, err := late.deliver()
	// The batch's statements: the lock (one row), then the record write, which answers one
	// row per record it wrote.
	if err != nil || len(codes) != 0 || !slices.Equal(tags, []string{"SELECT 1", "SELECT 0"}) {
		t.Fatalf("the late statement was answered with errors %v, command tags %q, %v; want one record write that wrote nothing", codes, tags, err)
	}
	var after []byte
	if err := conn.QueryRow(ctx, "SELECT body FROM effectfence_records WHERE intent = $1", r.Intent).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("the late statement changed the record:\n%s\n%s", before, after)
	}
	rec, err := e.Status(ctx, r.Intent)
	if err != nil || rec.State != fence.StateDone || rec.Cert.Hash != cert.Hash {
		t.Fatalf("recorded: %+v %v", rec, err)
	}
	if n := admitted(t, e); n != 1 {
		t.Fatalf("admitted %d, want 1", n)
	}
}

// TestSpeculativeCommitReadCommitted: one-statement commits run at the session's default
// isolation level, which the store sets to READ COMMITTED whatever the URL or the server say:
// under REPEATABLE READ the guard would read the record as of before the intent's lock.
func TestSpeculativeCommitReadCommitted(t *testing.T) {
	ctx := context.Background()
	raw := testURL(t)
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	s, err := Open(ctx, Config{URL: raw + sep + "default_transaction_isolation=" + "repeatable%20read", Schema: testSchema(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var level string
	if err := s.pool.QueryRow(ctx, "SHOW default_transaction_isolation").Scan(&level); err != nil || level != "read committed" {
		t.Fatalf("default_transaction_isolation %q %v", level, err)
	}
}

// BenchmarkSpeculationPaired compares, op by op under the same load, a fresh call (admission
// + commit) whose commit is one statement, the same call with commits as transactions (a
// second store on the same schema, speculation off), and the bare durable work of a fresh call
// (a claim-sized row inserted, then updated with an outcome-sized body: two autocommit
// statements). Op i runs kind i%3, so on a shared machine all three meet the same load; it
// reports each kind's mean latency (spec-µs, txn-µs, floor-µs) and the ratios to the floor.
//
//	go test -run '^$' -bench SpeculationPaired -benchtime 3000x ./pkg/store/postgres/
func BenchmarkSpeculationPaired(b *testing.B) {
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			schema := testSchema(b)
			ctx := context.Background()
			spec, txn := openSchema(b, schema), openSchema(b, schema)
			txn.noSpeculation.Store(true)
			engines := []*fence.Engine{fence.New(spec, fence.Config{}), fence.New(txn, fence.Config{})}
			conn := admin(b, schema)
			if _, err := conn.Exec(ctx, "CREATE TABLE probe (intent text PRIMARY KEY, body bytea NOT NULL)"); err != nil {
				b.Fatal(err)
			}
			idle := make(chan *pgx.Conn, callers)
			for range callers {
				idle <- admin(b, schema)
			}
			claim, outcome := bytes.Repeat([]byte("c"), 480), bytes.Repeat([]byte("o"), 860)
			var ns [3]atomic.Int64
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range callers {
				wg.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= b.N {
							return
						}
						intent := "paired:" + strconv.Itoa(i)
						kind := i % 3
						t0 := time.Now()
						var err error
						if kind < 2 {
							e := engines[kind]
							var adm fence.Admission
							if adm, err = e.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge_card", Args: []byte(`{"amount":4900}`)}); err == nil {
								_, err = e.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`))
							}
						} else {
							c := <-idle
							if _, err = c.Exec(ctx, "INSERT INTO probe (intent, body) VALUES ($1, $2)", intent, claim); err == nil {
								_, err = c.Exec(ctx, "UPDATE probe SET body = $2 WHERE intent = $1", intent, outcome)
							}
							idle <- c
						}
						if err != nil {
							b.Error(err)
							return
						}
						ns[kind].Add(int64(time.Since(t0)))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			per := func(kind int) float64 { return float64(ns[kind].Load()) / float64((b.N+2-kind)/3) }
			b.ReportMetric(per(0)/1e3, "spec-µs")
			b.ReportMetric(per(1)/1e3, "txn-µs")
			b.ReportMetric(per(2)/1e3, "floor-µs")
			b.ReportMetric(per(0)/per(2), "spec-x-floor")
			b.ReportMetric(per(1)/per(2), "txn-x-floor")
		})
	}
}
