package postgres

// One-statement commits.
//
// A fresh call costs two durable commits: its claim and its outcome. The claim is a
// transaction (the intent's lock, the record, a token and the domains must be read before the
// engine decides), but the outcome rarely needs the server to decide: the engine commits the
// claim that this very store wrote a moment ago. So the store remembers the claims it wrote
// (claimCache), and Update first runs fn speculatively against the remembered claim. If fn
// reads nothing else and writes the intent's done record, its writes travel in one
// autocommit batch, one round trip, whose statements take the intent's lock and write only
// if the record is still exactly that claim (and the clock fn used is the server's, within
// specSlack); if they wrote nothing, Update runs fn again in a transaction, as it always did.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectfence/effectfence/pkg/fence"
)

// specSlack bounds how far the clock a speculative commit or claim uses (a reading of the
// server's clock plus the local monotonic time elapsed since: the claim's, or the store's
// last) may lag the server's clock once the statement holds the intent's lock. It is never
// ahead of it.
const specSlack = 100 * time.Millisecond

// specClockGuard is a speculative statement's check of fn's clock, its parameter $7, against
// the server's (see specSlack).
var specClockGuard = fmt.Sprintf("$7::timestamptz <= clock_timestamp() AND clock_timestamp() <= $7::timestamptz + interval '%d milliseconds'", specSlack.Milliseconds())

// countersOnWrite is a WITH clause that adds to a counters row, as countersUpsert does, once
// per row of w: its parameters (shard, then the ten counters in fence.Counters order) are
// numbered from base+1.
func countersOnWrite(base int) string {
	p := make([]string, 10)
	for i := range p {
		p[i] = fmt.Sprintf("$%d", base+2+i)
	}
	return fmt.Sprintf(`, n AS (INSERT INTO effectfence_counters AS c (shard, updated_at, admitted, reclaimed, replayed, coalesced, stale, race, in_flight, prior_failure, conflict, lease_lost)
	SELECT $%d, clock_timestamp(), %s FROM w
%s)`, base+1, strings.Join(p, ", "), countersAdd)
}

// errSpeculation ends a speculative run; it never leaves the store.
var errSpeculation = errors.New("postgres ledger: the commit needs a transaction")

// The batch of a speculative commit runs as one implicit transaction (one Sync): the intent's
// lock, then, in a statement of its own (so that its snapshot is taken once the lock is
// held), the done record written over the claim only if the row still holds exactly the
// claim's body and fn's clock is within specSlack behind clock_timestamp(); the counters and
// the waiters' notification only if the record was written. The statement answers one row
// per record it wrote: none is a miss, and the transaction commits nothing.
var (
	specLock        = `SELECT pg_advisory_xact_lock($1) WHERE ` + durable + ` AND ` + readable
	specPut         = specPutSQL(false)
	specPutCounters = specPutSQL(true)
)

// specPutSQL is the guarded write of a done record over a claim: $1 intent, $2-$5 as in
// putRecord, $6 the claim's body, $7 fn's clock, $8 the waiters' channel, then the counters
// row as in countersUpsert.
func specPutSQL(counters bool) string {
	s := `WITH w AS (UPDATE effectfence_records SET state = $2, expires_at = $3, cert_hash = $4, body = $5
	WHERE intent = $1 AND body = $6 AND ` + specClockGuard + ` RETURNING 1)`
	if counters {
		s += countersOnWrite(8)
	}
	// One row per record written, and the waiters' notification evaluated only for such a
	// row (an uncorrelated subquery runs when first needed). Counting the rows with count(*)
	// and joining the waiters with w cost the server 12 µs more per commit (EXPLAIN ANALYZE of
	// the generic plans, median of 300 each).
	return s + `
SELECT (SELECT pg_notify($8, $1) FROM effectfence_waiters WHERE intent = $1 LIMIT 1) FROM w`
}

// abandon ends a speculative run: fn needs what only a transaction can give it.
func (t *tx) abandon() error {
	if t.err == nil {
		t.err = errSpeculation
	}
	return t.err
}

// specGet answers a speculative Get from the claim cache, queueing the intent's lock. Any
// other read ends the speculation.
func (t *tx) specGet(intent string) (*fence.Record, error) {
	if t.err != nil {
		return nil, t.err
	}
	if len(t.prefetch) > 0 || (t.specIntent != "" && intent != t.specIntent) {
		return nil, t.abandon()
	}
	if t.specFresh {
		return nil, nil // told absent already
	}
	if t.specIntent == "" {
		c, ok := t.s.claims.get(intent)
		if !ok {
			return t.specAbsent(intent)
		}
		t.specIntent, t.specClaim, t.specRec = intent, c.body, c.rec
		t.now = c.now.Add(time.Since(c.at)).Truncate(time.Microsecond)
		t.locked = map[string]bool{intent: true}
		t.pending.Queue(specLock+t.s.pinned, lockKey(t.s.schema, "intent", intent))
	}
	rec := t.specRec
	if rec == nil {
		var err error
		if rec, err = t.decodeRecord(intent, t.specClaim); err != nil {
			return nil, t.abandon() // a transaction reports it
		}
	}
	t.state = map[string]fence.State{intent: rec.State}
	return rec, nil
}

// shardArg is a counter shard argument of a queued statement, named once the connection (and
// so the shard) is known.
type shardArg struct {
	q *pgx.QueuedQuery
	i int
}

func (t *tx) shard(q *pgx.QueuedQuery, i int) {
	if t.spec {
		t.shards = append(t.shards, shardArg{q, i})
	}
}

// wrote notes a record write for the claim cache: decoded, when not nil, is the record that
// decoding body gives.
func (t *tx) wrote(intent string, state fence.State, body []byte, decoded *fence.Record) {
	if state != fence.StateInFlight {
		body, decoded = nil, nil
	}
	t.written = append(t.written, claimWrite{intent, body, decoded})
}

// learn tells the claim cache what a committed transaction wrote.
func (t *tx) learn() {
	for _, w := range t.written {
		if w.body != nil && !t.nowAt.IsZero() {
			t.s.claims.put(w.intent, claim{body: w.body, rec: w.rec, now: t.now, at: t.nowAt})
		} else {
			t.s.claims.forget(w.intent)
		}
	}
}

// claim is an in-flight record this store committed, and the clock it was written under: the
// server's clock read under the intent's lock and the local instant that reading arrived, a
// clock that has only moved on since. rec, when not nil, is the record decoding body gives
// (fence.EncodeRecordDecoded's): a speculative Get answers with it instead of decoding body
// again, which was about a quarter of the client's instructions per fresh call. It is shared
// by whoever gets it; the engine never changes a record it got (it copies one to write a new
// version), as with the memory store, which hands out the records it holds.
type claim struct {
	body []byte
	rec  *fence.Record
	now  time.Time
	at   time.Time
}

// claimCache remembers the claims this store wrote, bounded in entries and bytes (an entry
// evicted at random only costs its commit the transaction path).
type claimCache struct {
	mu    sync.Mutex
	m     map[string]claim
	bytes int
	n     atomic.Int64
}

const (
	claimCacheEntries = 4096
	claimCacheBytes   = 16 << 20
	claimMaxBytes     = 256 << 10
)

// cost is what an entry counts against claimCacheBytes: its body, and as much again for the
// decoded record, whose strings and raw values are about the body's size.
func (e claim) cost() int {
	if e.rec != nil {
		return 2 * len(e.body)
	}
	return len(e.body)
}

func (c *claimCache) put(intent string, e claim) {
	if len(e.body) > claimMaxBytes {
		c.forget(intent)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]claim{}
	}
	if old, ok := c.m[intent]; ok {
		c.bytes -= old.cost()
		delete(c.m, intent)
	}
	for k, v := range c.m {
		if len(c.m) < claimCacheEntries && c.bytes+e.cost() <= claimCacheBytes {
			break
		}
		c.bytes -= v.cost()
		delete(c.m, k)
	}
	c.m[intent] = e
	c.bytes += e.cost()
	c.n.Store(int64(len(c.m)))
}

func (c *claimCache) get(intent string) (claim, bool) {
	if c.n.Load() == 0 {
		return claim{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[intent]
	return e, ok
}

func (c *claimCache) forget(intent string) {
	if c.n.Load() == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[intent]; ok {
		c.bytes -= old.cost()
		delete(c.m, intent)
		c.n.Store(int64(len(c.m)))
	}
}

// speculate tries fn as a one-statement commit. done says whether Update is over (with err);
// otherwise nothing of the attempt was recorded and fn must run in a transaction.
//
// A batch whose answer is lost may or may not have committed, and may even still be on its
// way to the server. Then fn runs in a transaction all the same, under the intent's lock: if
// the batch committed, the record is the done record it wrote (the engine recognises its own
// commit and writes nothing; the counters it carried are not added again); if not, the
// transaction's own write makes the batch's guard fail wherever it still is. Only if that
// transaction fails too is the outcome unknown.
func (s *Store) speculate(ctx context.Context, fn func(fence.Tx) error) (done bool, err error) {
	t := &tx{s: s, ctx: ctx, write: true, spec: true}
	if err := fn(t); err != nil || t.err != nil || (t.specDone == nil && t.specCut[0] == nil) {
		return false, nil
	}
	intent, fresh := t.specIntent, t.specFresh
	if fresh {
		return s.speculateClaim(ctx, t, fn)
	}
	s.claims.forget(intent) // whatever happens next, the record will not be that claim
	sent, closed, warned, err := s.sendSpec(ctx, t, "speculate")
	if !sent {
		return false, nil // the transaction path reports it
	}
	switch {
	case err == nil && t.specHit > 0:
		if warned {
			// Its wait for a synchronous standby may have been cancelled (standby.go).
			if cerr := s.confirm(ctx); cerr != nil {
				return true, s.keep(CommitUnknownError{Err: cerr}, doubt{intent: intent, body: t.specDone, claim: t.specClaim, delta: t.delta, reports: t.reports})
			}
		}
		s.at("speculated", t.pid)
		return true, nil
	case err == nil || !closed || pgconn.SafeToRetry(err):
		// The guard found the record changed (nothing was written), or the server answered
		// with an error (its implicit transaction rolled back), or nothing was sent.
		s.at("speculation missed", t.pid)
		return false, nil
	}
	s.at("speculation lost", t.pid)
	lost := &lostStmt{intent: intent, body: t.specDone, shard: t.specShard, base: t.specBase, delta: t.delta}
	if terr := s.transact(ctx, fn, lost); terr != nil {
		// The statement may land yet, with the counters it carries, and so may the
		// transaction if its own answer was lost: the store settles them (doubt.go).
		d := doubt{intent: intent, body: t.specDone, claim: t.specClaim, delta: t.delta, stmtShard: t.specShard, stmtBase: t.specBase, reports: t.reports}
		if cu, ok := terr.(CommitUnknownError); ok {
			d.xid, d.shard = cu.Xid, cu.shard
		}
		return true, s.keep(CommitUnknownError{Err: errors.Join(err, terr)}, d)
	}
	return true, nil
}

// One-statement claims.
//
// A fresh call's claim needs the server only to check that the intent has no record, draw the
// next fencing token and stamp the claim with the server's clock, all under the intent's
// lock. So when fn asks for an intent this store has no claim of, Update first runs it
// speculatively: Get answers that there is no record, Now the server's clock as last read
// plus the local monotonic time elapsed since, and NextToken fence.PendingToken, which the
// engine binds (fence.LateToken). If fn then writes exactly that intent's claim, the claim
// travels in one autocommit batch: the intent's lock, then one statement that draws the token
// and writes the claim, its body spliced around the token's digits, only if the intent still
// has no record and fn's clock is within specSlack behind clock_timestamp(). If it wrote
// nothing, fn runs again in a transaction, as it always did.

// clockReading is the server's clock as read once an intent's lock was granted, and the local
// instant the reading arrived.
type clockReading struct {
	now time.Time
	at  time.Time
}

var (
	specClaim         = specClaimSQL(false)
	specClaimCounters = specClaimSQL(true)
)

// specClaimSQL is the guarded write of a fresh claim: $1-$4 as in insertRecord, $5 and $6 the
// body before and after the token's digits, $7 fn's clock, then the counters row as in
// countersUpsert. It answers the token it drew (NULL when it wrote nothing) and the server's
// clock. t is evaluated once (it is materialized), and its nextval only when its conditions
// hold.
func specClaimSQL(counters bool) string {
	s := `WITH t AS MATERIALIZED (SELECT nextval('effectfence_token') AS v
	WHERE NOT EXISTS (SELECT 1 FROM effectfence_records WHERE intent = $1) AND ` + specClockGuard + `),
w AS (INSERT INTO effectfence_records (intent, state, expires_at, cert_hash, body)
	SELECT $1::text, $2::text, $3::timestamptz, $4::text, $5::bytea || convert_to(v::text, 'UTF8') || $6::bytea FROM t RETURNING 1)`
	if counters {
		s += countersOnWrite(7)
	}
	return s + `
SELECT (SELECT v FROM t), clock_timestamp()`
}

// specAbsent begins a speculative claim of intent: fn is told it has no record, and its clock
// is reckoned from the server's last reading.
func (t *tx) specAbsent(intent string) (*fence.Record, error) {
	c := t.s.clock.Load()
	if c == nil || t.s.noFreshSpeculation.Load() {
		return nil, t.abandon()
	}
	t.nowAt = time.Now()
	t.specIntent, t.specFresh = intent, true
	t.now = c.now.Add(t.nowAt.Sub(c.at)).Truncate(time.Microsecond)
	t.locked = map[string]bool{intent: true}
	t.pending.Queue(specLock+t.s.pinned, lockKey(t.s.schema, "intent", intent))
	t.state = map[string]fence.State{intent: fence.StateNone}
	return nil, nil
}

// BindToken (fence.LateToken) names where the engine keeps a speculative claim's token.
func (t *tx) BindToken(dst ...*uint64) {
	if t.spec && t.specFresh && t.specTokens {
		t.tokenDst = dst
	}
}

// tokenMark is how a record's body spells a token of fence.PendingToken.
var tokenMark = []byte(`,"token":` + strconv.FormatUint(fence.PendingToken, 10))

// putFresh queues the speculative claim's guarded write. Anything but the one claim of the
// intent, with the pending token bound, ends the speculation.
func (t *tx) putFresh(rec *fence.Record) error {
	if t.err != nil {
		return t.err
	}
	if rec.Intent != t.specIntent || rec.State != fence.StateInFlight || rec.Token != fence.PendingToken || len(t.tokenDst) == 0 || t.specCut[0] != nil {
		return t.abandon()
	}
	body, decoded, err := fence.EncodeRecordDecoded(rec, claimMaxBytes)
	if err != nil {
		return t.abandon() // a transaction reports it
	}
	// The first such bytes are the record's own token: it follows the intent, the state and
	// the fingerprint, strings in which every quote is escaped.
	i := bytes.Index(body, tokenMark)
	if i < 0 {
		return t.abandon()
	}
	cut := i + len(`,"token":`)
	t.specCut = [2][]byte{body[:cut], body[i+len(tokenMark):]}
	t.specNew = decoded
	var expires, certHash any
	if !rec.ExpiresAt.IsZero() {
		expires = rec.ExpiresAt
	}
	if rec.Cert != nil {
		certHash = rec.Cert.Hash
	}
	t.queueRecord(specClaim, specClaimCounters, rec.Intent, string(rec.State), expires, certHash, t.specCut[0], t.specCut[1], t.now)
	t.record.QueryRow(func(r pgx.Row) error { return r.Scan(&t.specToken, &t.specClock) })
	return t.err
}

// claimed completes a speculative claim recorded with token: the engine's ticket and record
// get it, and the claim cache the claim as recorded.
func (t *tx) claimed(token int64) {
	v := uint64(token)
	for _, d := range t.tokenDst {
		*d = v
	}
	body := make([]byte, 0, len(t.specCut[0])+20+len(t.specCut[1]))
	body = append(body, t.specCut[0]...)
	body = strconv.AppendInt(body, token, 10)
	body = append(body, t.specCut[1]...)
	rec := t.specNew
	if rec != nil {
		rec.Token = v
	}
	t.s.claims.put(t.specIntent, claim{body: body, rec: rec, now: t.now, at: t.nowAt})
}

// cutToken says whether body is a claim spliced from cut, and with which token.
func cutToken(body []byte, cut [2][]byte) (int64, bool) {
	if len(body) < len(cut[0])+len(cut[1])+1 || !bytes.HasPrefix(body, cut[0]) || !bytes.HasSuffix(body, cut[1]) {
		return 0, false
	}
	digits := body[len(cut[0]) : len(body)-len(cut[1])]
	v, err := strconv.ParseInt(string(digits), 10, 64)
	if err != nil || v <= 0 || strconv.FormatInt(v, 10) != string(digits) {
		return 0, false
	}
	return v, true
}

// settleClaim learns whether a speculative claim whose answer was lost is recorded. Its
// statement writes only while the server's clock is at most specSlack past now; so once the
// clock is past that, read under the intent's lock, a claim not recorded never will be (a
// statement still on its way waits for the lock, then finds the clock past).
//
// It only reads, so a connection that dies under it is simply replaced: the batch was lost
// because its connection had died, and after a server restart so has every connection the
// pool holds (the pool discards each one it hands out), so it tries once more than the pool's
// size, as run does. Before, one dead connection here refused the claim as a ledger failure
// that may have recorded it (TestCallsRightAfterAServerRestart).
func (s *Store) settleClaim(ctx context.Context, intent string, cut [2][]byte, now time.Time) (token int64, landed bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for try := 1; ; try++ {
		var dead bool
		token, landed, dead, err = s.settleClaimOnce(ctx, intent, cut, now)
		if !dead || ctx.Err() != nil || try > int(s.pool.Stat().MaxConns()) {
			if err == nil && landed {
				// Recorded on this server; its wait for a synchronous standby may have been
				// ended with the connection (standby.go).
				if cerr := s.confirm(ctx); cerr != nil {
					return 0, false, cerr
				}
			}
			return token, landed, err
		}
	}
}

// settleClaimOnce is one try of settleClaim; dead says it failed because its connection died.
func (s *Store) settleClaimOnce(ctx context.Context, intent string, cut [2][]byte, now time.Time) (token int64, landed, dead bool, err error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, false, false, err
	}
	defer pc.Release()
	defer func() { dead = err != nil && pc.Conn().IsClosed() }()
	tx, err := pc.Begin(ctx)
	if err != nil {
		return 0, false, false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// It holds the intent's lock across round trips: bounded, as a write transaction is.
	if _, err := tx.Exec(ctx, specLock+" AND "+bounded+s.pinned, lockKey(s.schema, "intent", intent)); err != nil {
		return 0, false, false, err
	}
	deadline := now.Add(specSlack)
	for {
		var body []byte
		var clock time.Time
		if err := tx.QueryRow(ctx, `SELECT (SELECT body FROM effectfence_records WHERE intent = $1), clock_timestamp()`, intent).Scan(&body, &clock); err != nil {
			return 0, false, false, err
		}
		if v, ok := cutToken(body, cut); ok {
			return v, true, false, nil
		}
		if clock.After(deadline) {
			return 0, false, false, nil
		}
		select {
		case <-time.After(deadline.Sub(clock) + time.Millisecond):
		case <-ctx.Done():
			return 0, false, false, ctx.Err()
		}
	}
}

// speculateClaim sends the batch of a speculative claim t, as speculate does a commit's.
func (s *Store) speculateClaim(ctx context.Context, t *tx, fn func(fence.Tx) error) (done bool, err error) {
	sent, closed, warned, err := s.sendSpec(ctx, t, "speculate claim")
	if !sent {
		return false, nil // the transaction path reports it
	}
	if err == nil && !t.specClock.IsZero() {
		s.clock.Store(&clockReading{t.specClock.UTC(), time.Now()})
	}
	switch {
	case err == nil && t.specToken != nil:
		if warned {
			// Its wait for a synchronous standby may have been cancelled (standby.go).
			if cerr := s.confirm(ctx); cerr != nil {
				d := doubt{intent: t.specIntent, cut: t.specCut, until: t.now.Add(specSlack), delta: t.delta}
				return true, s.keep(CommitUnknownError{Err: cerr, claim: true}, d)
			}
		}
		t.claimed(*t.specToken)
		s.at("speculated claim", t.pid)
		return true, nil
	case err == nil || !closed || pgconn.SafeToRetry(err):
		// The intent has a record, or the clock was off, or the server answered with an
		// error, or nothing was sent: nothing was written.
		s.at("claim speculation missed", t.pid)
		return false, nil
	}
	s.at("claim speculation lost", t.pid)
	token, landed, serr := s.settleClaim(ctx, t.specIntent, t.specCut, t.now)
	switch {
	case serr == nil && landed:
		t.claimed(token)
		s.at("claim speculation landed", 0)
		return true, nil
	case serr == nil:
		s.at("claim speculation never landed", 0)
		return false, nil // not recorded, and never will be: the transaction path
	}
	// The claim may be recorded, with the counters it carried: the store settles them
	// (doubt.go). The engine runs nothing without the ticket it did not get.
	d := doubt{intent: t.specIntent, cut: t.specCut, until: t.now.Add(specSlack), delta: t.delta, stmtShard: t.specShard, stmtBase: t.specBase}
	return true, s.keep(CommitUnknownError{Err: errors.Join(err, serr), claim: true}, d)
}

// sendSpec sends a speculative batch on a connection of the pool, naming the counters' shard
// once the connection is known. sent is false when no connection could be had (nothing was
// sent); closed says whether the connection died with the batch, warned whether the server
// sent a WARNING with its answer (standby.go).
func (s *Store) sendSpec(ctx context.Context, t *tx, stage string) (sent, closed, warned bool, err error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, false, false, nil
	}
	conn := pc.Conn()
	t.conn, t.pid = conn, conn.PgConn().PID()
	shard := s.shard(conn.PgConn())
	t.specShard, t.specBase = shard, *connCounted(conn.PgConn())
	for _, a := range t.shards {
		a.q.Arguments[a.i] = shard
	}
	s.at(stage, t.pid)
	s.warns.reset(conn.PgConn())
	err = conn.SendBatch(ctx, &t.pending).Close()
	closed = conn.IsClosed()
	warned = s.warns.warned(conn.PgConn())
	if err == nil && (t.specToken != nil || t.specHit > 0) {
		// It wrote its record, and its counters with it.
		c := connCounted(conn.PgConn())
		*c = c.Add(t.delta)
	}
	pc.Release()
	return true, closed, warned, err
}
