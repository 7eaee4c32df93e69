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
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectfence/effectfence/pkg/fence"
)

// specSlack bounds how far the clock a speculative commit uses (the server's clock at the
// claim plus the local monotonic time elapsed since) may lag the server's clock once the
// commit holds the intent's lock. It is never ahead of it.
const specSlack = 100 * time.Millisecond

// errSpeculation ends a speculative run; it never leaves the store.
var errSpeculation = errors.New("postgres ledger: the commit needs a transaction")

// The batch of a speculative commit runs as one implicit transaction (one Sync): the intent's
// lock, then, in a statement of its own (so that its snapshot is taken once the lock is
// held), the done record written over the claim only if the row still holds exactly the
// claim's body and fn's clock is within specSlack behind clock_timestamp(); the counters and
// the waiters' notification only if the record was written. The statement answers one row
// per record it wrote: none is a miss, and the transaction commits nothing.
var (
	specLock        = `SELECT pg_advisory_xact_lock($1)`
	specPut         = specPutSQL(false)
	specPutCounters = specPutSQL(true)
)

// specPutSQL is the guarded write of a done record over a claim: $1 intent, $2-$5 as in
// putRecord, $6 the claim's body, $7 fn's clock, $8 the waiters' channel, then the counters
// row as in countersUpsert.
func specPutSQL(counters bool) string {
	s := fmt.Sprintf(`WITH w AS (UPDATE effectfence_records SET state = $2, expires_at = $3, cert_hash = $4, body = $5
	WHERE intent = $1 AND body = $6 AND $7::timestamptz <= clock_timestamp() AND clock_timestamp() <= $7::timestamptz + interval '%d milliseconds' RETURNING 1)`, specSlack.Milliseconds())
	if counters {
		p := make([]string, 10)
		for i := range p {
			p[i] = fmt.Sprintf("$%d", 10+i)
		}
		s += `, n AS (INSERT INTO effectfence_counters AS c (shard, updated_at, admitted, reclaimed, replayed, coalesced, stale, race, in_flight, prior_failure, conflict, lease_lost)
	SELECT $9, clock_timestamp(), ` + strings.Join(p, ", ") + ` FROM w
` + countersAdd + `)`
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
	if t.specIntent == "" {
		c, ok := t.s.claims.get(intent)
		if !ok {
			return nil, t.abandon()
		}
		t.specIntent, t.specClaim, t.specRec = intent, c.body, c.rec
		t.now = c.now.Add(time.Since(c.at)).Truncate(time.Microsecond)
		t.locked = map[string]bool{intent: true}
		t.pending.Queue(specLock, lockKey(t.s.schema, "intent", intent))
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
	if err := fn(t); err != nil || t.err != nil || t.specDone == nil {
		return false, nil
	}
	intent := t.specIntent
	s.claims.forget(intent) // whatever happens next, the record will not be that claim
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, nil // the transaction path reports it
	}
	conn := pc.Conn()
	t.conn, t.pid = conn, conn.PgConn().PID()
	shard := s.shard(t.pid)
	for _, a := range t.shards {
		a.q.Arguments[a.i] = shard
	}
	s.at("speculate", t.pid)
	err = conn.SendBatch(ctx, &t.pending).Close()
	closed := conn.IsClosed()
	pc.Release()
	switch {
	case err == nil && t.specHit > 0:
		s.at("speculated", t.pid)
		return true, nil
	case err == nil || !closed || pgconn.SafeToRetry(err):
		// The guard found the record changed (nothing was written), or the server answered
		// with an error (its implicit transaction rolled back), or nothing was sent.
		s.at("speculation missed", t.pid)
		return false, nil
	}
	s.at("speculation lost", t.pid)
	if terr := s.transact(ctx, fn, t.specDone); terr != nil {
		// The statement may land yet, with the counters it carries, and so may the
		// transaction if its own answer was lost: the store settles them (doubt.go).
		d := doubt{intent: intent, body: t.specDone, claim: t.specClaim, delta: t.delta}
		if cu, ok := terr.(CommitUnknownError); ok {
			d.xid = cu.Xid
		}
		return true, s.keep(CommitUnknownError{Err: errors.Join(err, terr)}, d)
	}
	return true, nil
}
