package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
)

// killer terminates the backend of a store's transaction from the test's own connection when
// the store reaches the armed stage, once, and waits until the backend is gone.
type killer struct {
	t       *testing.T
	admin   *pgx.Conn
	mu      sync.Mutex
	stage   string
	killed  atomic.Int64
	aborted atomic.Int64 // commits found aborted by txid_status
}

func (k *killer) arm(stage string) {
	k.mu.Lock()
	k.stage = stage
	k.mu.Unlock()
}

func (k *killer) hook(stage string, pid uint32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if stage == "resolved aborted" {
		k.aborted.Add(1)
	}
	if k.stage != stage {
		return
	}
	k.stage = ""
	var ok bool
	// With a timeout, pg_terminate_backend waits until the backend has exited.
	if err := k.admin.QueryRow(context.Background(), "SELECT pg_terminate_backend($1, 5000)", int32(pid)).Scan(&ok); err != nil || !ok {
		k.t.Errorf("terminating backend %d: %v %v", pid, ok, err)
		return
	}
	k.killed.Add(1)
}

// effect is the external witness: a table the "side effect" inserts into, outside the fence's
// transactions.
// replaysOnce checks the promise of every test here: a duplicate of r is answered with cert,
// the recorded outcome, and the effect (counted by witness) ran once.
func replaysOnce(t *testing.T, e *fence.Engine, r fence.Request, cert *fence.Cert, count func(string) int) {
	t.Helper()
	adm, err := e.Prepare(context.Background(), r)
	if err != nil || adm.Fresh() || adm.Cert.Hash != cert.Hash {
		t.Fatalf("duplicate: %+v %v", adm, err)
	}
	if n := count(r.Intent); n != 1 {
		t.Fatalf("effect ran %d times", n)
	}
}

func witness(t *testing.T, conn *pgx.Conn) func(intent string) int {
	t.Helper()
	if _, err := conn.Exec(context.Background(), "CREATE TABLE witness (intent text NOT NULL, who text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return func(intent string) int {
		var n int
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM witness WHERE intent = $1", intent).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// attempt is what a careful caller does: prepare; run the effect only on a fresh ticket;
// commit. It returns the prepare error, if any.
func attempt(ctx context.Context, e *fence.Engine, conn *pgx.Conn, r fence.Request, who string) (*fence.Ticket, error) {
	adm, err := e.Prepare(ctx, r)
	if err != nil {
		return nil, err
	}
	if !adm.Fresh() {
		return nil, nil
	}
	if _, err := conn.Exec(ctx, "INSERT INTO witness (intent, who) VALUES ($1, $2)", r.Intent, who); err != nil {
		return nil, err
	}
	return adm.Ticket, nil
}

func wantConnLost(t *testing.T, err error, stage string) {
	t.Helper()
	var lost ConnLostError
	if !errors.As(err, &lost) || lost.Stage != stage {
		t.Fatalf("error %v (%T), want connection lost during %s", err, err, stage)
	}
	if fence.CodeOf(err) != fence.CodeStore {
		t.Fatalf("code %q, want %q", fence.CodeOf(err), fence.CodeStore)
	}
	if !strings.Contains(err.Error(), "did not commit") {
		t.Fatalf("message does not say what happened: %v", err)
	}
}

func TestTerminateBackendDuringPrepare(t *testing.T) {
	schema := testSchema(t)
	s := openSchema(t, schema)
	conn := admin(t, schema)
	count := witness(t, conn)
	k := &killer{t: t, admin: admin(t, "")}
	s.hook = k.hook
	e := fence.New(s, fence.Config{})
	ctx := context.Background()
	r := fence.Request{Intent: "charge:kill-prepare", Tool: "charge", Args: []byte(`{"amount":1}`), Domain: "acct"}

	for _, stage := range []string{"begin", "commit"} {
		k.arm(stage)
		tk, err := attempt(ctx, e, conn, r, "first")
		if tk != nil || err == nil {
			t.Fatalf("stage %s: prepare survived a terminated backend: %+v %v", stage, tk, err)
		}
		if stage == "begin" {
			// The domain's read travels with the record's (fence.DomainPrefetcher), so the
			// claim's next round trip after its first is its COMMIT.
			wantConnLost(t, err, "commit")
		} else {
			wantConnLost(t, err, "commit") // COMMIT never reached the server: txid_status says aborted
		}
		t.Logf("stage %s: %v", stage, err)
		st, err := e.Status(ctx, r.Intent)
		if err != nil || st.State != fence.StateNone {
			t.Fatalf("after kill at %s: status %+v %v; want nothing recorded", stage, st, err)
		}
		if seq, err := e.Current(ctx, "acct"); err != nil || seq != 0 {
			t.Fatalf("after kill at %s: domain at %d %v; want 0", stage, seq, err)
		}
	}
	// Both kills land before COMMIT reaches the server, and both are resolved as aborted.
	if k.killed.Load() != 2 || k.aborted.Load() != 2 {
		t.Fatalf("killed %d backends, resolved %d commits as aborted; want 2 and 2", k.killed.Load(), k.aborted.Load())
	}
	// The next call reconnects and runs the effect, once.
	tk, err := attempt(ctx, e, conn, r, "retry")
	if err != nil || tk == nil {
		t.Fatalf("retry after reconnect: %+v %v", tk, err)
	}
	if _, err := e.Commit(ctx, *tk, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	if _, err := attempt(ctx, e, conn, r, "dup"); err != nil {
		t.Fatal(err)
	}
	if n := count(r.Intent); n != 1 {
		t.Fatalf("effect ran %d times", n)
	}
}

func TestTerminateBackendDuringCommit(t *testing.T) {
	schema := testSchema(t)
	s := openSchema(t, schema)
	conn := admin(t, schema)
	count := witness(t, conn)
	k := &killer{t: t, admin: admin(t, "")}
	s.hook = k.hook
	e := fence.New(s, fence.Config{})
	ctx := context.Background()
	s.noSpeculation.Store(true) // the commit's transaction; spec_test.go kills one-statement commits
	r := fence.Request{Intent: "charge:kill-commit", Tool: "charge", Args: []byte(`{"amount":2}`), Domain: "acct"}
	tk, err := attempt(ctx, e, conn, r, "holder")
	if err != nil || tk == nil {
		t.Fatal(tk, err)
	}
	for _, stage := range []string{"begin", "commit"} {
		k.arm(stage)
		_, err = e.Commit(ctx, *tk, []byte(`{"charge":"ch_1"}`))
		// Killed after the commit's first round trip (lock and read) or just before COMMIT:
		// either way COMMIT never ran, and txid_status says aborted.
		wantConnLost(t, err, "commit")
		t.Logf("stage %s: %v", stage, err)
		// Consistent: still in flight under the holder's claim; a duplicate is refused.
		st, err := e.Status(ctx, r.Intent)
		if err != nil || st.State != fence.StateInFlight || st.Token != tk.Token {
			t.Fatalf("after kill at %s: %+v %v", stage, st, err)
		}
		if _, err := attempt(ctx, e, conn, r, "dup"); !errors.Is(err, fence.ErrInFlight) {
			t.Fatalf("duplicate while the commit is unresolved: %v", err)
		}
	}
	if k.killed.Load() != 2 || k.aborted.Load() != 2 {
		t.Fatalf("killed %d backends, resolved %d commits as aborted; want 2 and 2", k.killed.Load(), k.aborted.Load())
	}
	// The holder retries its commit on a new connection.
	cert, err := e.Commit(ctx, *tk, []byte(`{"charge":"ch_1"}`))
	if err != nil {
		t.Fatal(err)
	}
	replaysOnce(t, e, r, cert, count)
}

// cutConn, once armed, severs the network connection at the next write that executes
// statements (a frontend Execute message): the write goes out, so the server receives the
// batch that ends in COMMIT, but nothing is read back from then on (pgconn reads in the
// background, so reads are cut too) and the connection is closed.
type cutConn struct {
	net.Conn
	armed   *atomic.Bool
	cut     *atomic.Int64
	severed *atomic.Bool
	watch   *backendWatch
}

// newCutConn wraps c; the test's armed write on it is its last. w (one per test, from
// newBackendWatch) sees the server answer that write before the connection goes.
func newCutConn(c net.Conn, armed *atomic.Bool, cut *atomic.Int64, w *backendWatch) cutConn {
	return cutConn{Conn: c, armed: armed, cut: cut, severed: new(atomic.Bool), watch: w}
}

var errSevered = errors.New("test: connection severed")

func (c cutConn) Read(b []byte) (int, error) {
	if c.severed.Load() {
		return 0, errSevered
	}
	n, err := c.Conn.Read(b)
	if c.severed.Load() {
		return 0, errSevered // whatever arrived after the cut is lost
	}
	return n, err
}

func (c cutConn) Write(b []byte) (int, error) {
	if c.severed.Load() {
		return 0, errSevered
	}
	if !executes(b) || !c.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(b)
	}
	c.severed.Store(true)
	since := c.watch.mark(c.Conn)
	n, err := c.Conn.Write(b)
	c.watch.served(since) // the server has run what was sent (COMMIT included) before the connection goes
	c.cut.Add(1)
	c.Conn.Close()
	return n, err
}

// backendWatch finds the server process behind a connection (pg_stat_activity's client_port
// is the connection's local port) from a connection of its own, opened with the test's store
// (newBackendWatch): opening it at the cut, between the store's reading of the clock and its
// statement, delayed a one-statement commit past its clock's slack (specSlack) on a loaded
// machine, and the statement, finding its clock stale, wrote nothing.
type backendWatch struct {
	mu    sync.Mutex
	admin *pgx.Conn
}

// newBackendWatch opens the watching connection; the test's end closes it.
func newBackendWatch(t *testing.T) *backendWatch {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, os.Getenv(EnvTestURL))
	if err != nil {
		t.Fatalf("watching backends: %v", err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	return &backendWatch{admin: admin}
}

// watchMark is a connection about to be watched: its backend's client port, and the server's
// clock before the write.
type watchMark struct {
	port int
	t0   time.Time
}

// mark starts watching c's backend; call it before the write to be watched. On a connection
// that is not TCP (a Unix socket has no port to find it by) it watches nothing.
func (w *backendWatch) mark(c net.Conn) watchMark {
	tcp, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return watchMark{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	m := watchMark{port: tcp.Port}
	if err := w.admin.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&m.t0); err != nil {
		panic(fmt.Sprintf("test: watching a backend: %v", err))
	}
	return m
}

// served waits until the watched backend has answered what was written after mark: it is
// idle (no statement running, no transaction open), and became so after the write. Under
// load the server may take its time to read a batch; a fixed pause before the cut let a
// COMMIT arrive after it, abort, and fail the test. Without a backend to watch it pauses 50
// ms, as before.
func (w *backendWatch) served(m watchMark) {
	if m.port == 0 {
		time.Sleep(50 * time.Millisecond)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var idle bool
		err := w.admin.QueryRow(ctx, `SELECT state = 'idle' AND state_change > $2 FROM pg_stat_activity WHERE client_port = $1`, m.port, m.t0).Scan(&idle)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			panic(fmt.Sprintf("test: watching a backend: %v", err))
		}
		if idle {
			return
		}
		time.Sleep(time.Millisecond)
	}
	panic(fmt.Sprintf("test: the backend on port %d did not answer the batch in 30 s", m.port))
}

// executes reports whether b holds a whole number of frontend messages one of which is
// Execute ('E').
func executes(b []byte) bool {
	found := false
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if n < 4 || 1+n > len(b) {
			return false
		}
		if b[0] == 'E' {
			found = true
		}
		b = b[1+n:]
	}
	return found && len(b) == 0
}

// TestCommitAcknowledgementLost: the COMMIT reaches the server but its answer is lost. The
// store asks the server (txid_status) on another connection and reports the truth: the
// commit landed, so Commit returns the cert, and nothing runs twice.
func TestCommitAcknowledgementLost(t *testing.T) {
	schema := testSchema(t)
	var armed, want atomic.Bool
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
	s.noSpeculation.Store(true) // COMMIT's acknowledgement; spec_test.go loses a one-statement commit's
	var resolved atomic.Int64
	s.hook = func(stage string, _ uint32) {
		if stage == "commit" && want.CompareAndSwap(true, false) {
			armed.Store(true)
		}
		if stage == "resolved committed" {
			resolved.Add(1)
		}
	}
	conn := admin(t, schema)
	count := witness(t, conn)
	e := fence.New(s, fence.Config{})
	r := fence.Request{Intent: "charge:lost-ack", Tool: "charge", Args: []byte(`{"amount":3}`)}

	// Lost acknowledgement of the claim: Prepare learns it committed and returns the ticket.
	want.Store(true)
	tk, err := attempt(ctx, e, conn, r, "holder")
	if err != nil || tk == nil {
		t.Fatalf("prepare with a lost acknowledgement: %+v %v", tk, err)
	}
	want.Store(true)
	cert, err := e.Commit(ctx, *tk, []byte(`"charged"`))
	if err != nil {
		t.Fatalf("commit with a lost acknowledgement: %v", err)
	}
	if cut.Load() != 2 || resolved.Load() != 2 {
		t.Fatalf("cut %d connections and resolved %d commits by txid_status, want 2 and 2", cut.Load(), resolved.Load())
	}
	replaysOnce(t, e, r, cert, count)
}

// downConn is a cutConn after whose cut every connection fails while down is set: the
// database is unreachable.
type downConn struct {
	cutConn
	down *atomic.Bool
}

func (c downConn) Read(b []byte) (int, error) {
	if c.down.Load() {
		return 0, errSevered
	}
	return c.cutConn.Read(b)
}

func (c downConn) Write(b []byte) (int, error) {
	if c.down.Load() {
		return 0, errSevered
	}
	before := c.cut.Load()
	n, err := c.cutConn.Write(b)
	if c.cut.Load() > before { // this write made the cut: the database goes away with it
		c.down.Store(true)
	}
	return n, err
}

// TestCommitOutcomeUnknown: the acknowledgement of COMMIT is lost and the server cannot be
// asked either. Commit says exactly that (CommitUnknownError, code store_error); once the
// database is back, Status shows the commit landed and a duplicate is replayed.
func TestCommitOutcomeUnknown(t *testing.T) {
	schema := testSchema(t)
	var armed, want, down atomic.Bool
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
	s.noSpeculation.Store(true) // COMMIT's acknowledgement; spec_test.go loses a one-statement commit's
	s.hook = func(stage string, _ uint32) {
		if stage == "commit" && want.CompareAndSwap(true, false) {
			armed.Store(true)
		}
	}
	e := fence.New(s, fence.Config{})
	r := fence.Request{Intent: "charge:unknown", Tool: "charge", Args: []byte(`{"amount":4}`)}
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	want.Store(true)
	_, err = e.Commit(ctx, *adm.Ticket, []byte(`"charged"`))
	var unknown CommitUnknownError
	if !errors.As(err, &unknown) || fence.CodeOf(err) != fence.CodeStore || !strings.Contains(err.Error(), "may or may not be recorded") {
		t.Fatalf("commit with the database gone: %v", err)
	}
	t.Logf("commit: %v", err)
	down.Store(false)
	st, err := e.Status(ctx, r.Intent)
	if err != nil || st.State != fence.StateDone || st.Token != adm.Ticket.Token {
		t.Fatalf("after the database is back: %+v %v", st, err)
	}
	again, err := e.Prepare(ctx, r)
	if err != nil || again.Fresh() || string(again.Cert.Result) != `"charged"` {
		t.Fatalf("duplicate: %+v %v", again, err)
	}
}
