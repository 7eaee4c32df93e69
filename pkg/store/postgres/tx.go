package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectfence/effectfence/pkg/fence"
)

// tx is one transaction. Writes are queued in pending and sent, in order, ahead of the next
// read or with COMMIT; the server runs them in that order, so reads see the transaction's own
// writes.
type tx struct {
	s     *Store
	ctx   context.Context
	conn  *pgx.Conn
	pid   uint32
	write bool
	// contended: an earlier run of this decision lost a swap, so domain reads lock their rows.
	contended bool
	now       time.Time
	xid       int64

	pending   pgx.Batch
	unstarted bool  // a write transaction whose clock and id are not queued yet (see start)
	begun     bool  // BEGIN has been executed
	err       error // the first failure: the server has aborted the transaction
	token     int64 // a fencing token fetched ahead by Get (0: none)

	record *pgx.QueuedQuery // the last record write queued, and its statement with the
	fold   string           // counters folded in (see AddCounters)

	locked  map[string]bool        // intents whose advisory lock this transaction holds
	state   map[string]fence.State // intents' states as Get found them (StateNone: no record)
	domains map[string]domainState // domain rows as first read (the swap's expected value)
	swapped map[string]bool        // domains this transaction compare-and-swaps
	floor   *uint64                // the floor as first read

	prefetch []string // domains to read along with the next Get (PrefetchDomain)

	nowAt   time.Time    // the local instant now was received (monotonic), or reckoned at (a speculative claim): the base of a claim's clock
	written []claimWrite // record writes in order, for the store's claim cache once committed

	// A speculative commit (see spec.go): fn runs against the claim this store wrote, and
	// its writes go in one autocommit batch guarded by that claim.
	spec       bool
	specIntent string        // the intent whose cached claim Get answered
	specClaim  []byte        // that claim's body, which the guard requires the row to hold
	specRec    *fence.Record // the record decoding specClaim gives, when the cache kept it
	specDone   []byte        // the done record's body the batch writes
	specHit    int           // records the batch wrote: 0 if the guard found the claim changed
	// A speculative claim (spec.go): fn found no cached claim of the intent and was told it
	// has no record; the batch writes the claim only if that is so under the intent's lock.
	specFresh  bool
	specTokens bool           // NextToken answered fence.PendingToken
	tokenDst   []*uint64      // where the engine keeps the claim's token (fence.LateToken)
	specCut    [2][]byte      // the claim's body before and after its token
	specToken  *int64         // the token the batch drew: nil if it wrote nothing
	specClock  time.Time      // the server's clock when the batch ran
	specShard  string         // the counters row of the batch's connection (sendSpec)
	specBase   fence.Counters // what that row held before the batch (connCounted)
	specNew    *fence.Record  // the record decoding the claim's body gives, token aside
	shards     []shardArg     // counter shard arguments to name once the connection is known
	// landed: a lost speculative commit; a transaction that finds its body recorded, or
	// its counters added (another process changed the record since), knows the commit
	// landed and adds no counters again.
	landed       *lostStmt
	dropCounters bool
	// earlier is what the record and the counters row told of landed, when its record was
	// found changed since (see EarlierAttempt).
	earlier earlierAttempt
	// reports are the outcomes this transaction writes: the records it ends, by their
	// tickets. A commit whose answer is lost keeps them in its doubt (doubt.go).
	reports []report
	// receipt: the transaction wrote this connection's counters row, whose row version then
	// names the transaction (xmin): the evidence resolve reads (postgres.go).
	receipt bool
	// delta is what AddCounters added: a commit whose answer is lost may carry it (doubt.go).
	delta fence.Counters
	// cursors counts the cursors Scan and Events declared (paged), which names each anew.
	cursors int
}

// claimWrite is a record write of a transaction: the body of an in-flight record, or nil,
// and the record decoding it gives, when known.
type claimWrite struct {
	intent string
	body   []byte
	rec    *fence.Record
}

type domainState struct {
	seq   uint64
	found bool
	floor uint64 // for an absent domain: the floor it read as
}

var errReadOnly = errors.New("postgres ledger: write in a read-only transaction")

// durable is true, and turns synchronous_commit on for the rest of the transaction where the
// session has it off. The first statement of every write transaction carries it (start and
// lock), and so does a one-statement write's lock (specLock): a COMMIT that records a claim
// or an outcome waits for the WAL flush whatever the session's setting. The pool's
// AfterConnect sets it for the session too, but behind a pooler in transaction mode
// (PgBouncer's pool_mode = transaction) a session is any of the pooler's server connections,
// most of which never ran AfterConnect: a role or database default of off reached them, and
// their COMMITs returned before the flush (TestTransactionPoolerKeepsReceiptsDurable). So is
// local, which does not wait for a synchronous standby (see AfterConnect, postgres.go); a
// stronger setting (remote_write, remote_apply) is kept. CASE runs set_config only when it is
// needed.
//
// It also lets the COMMIT's WARNING through where the session's client_min_messages is error
// (a role's or a database's setting that quiets what applications do not read): a COMMIT
// whose wait for the synchronous standby was cancelled succeeds, and that WARNING is all that
// tells the store the standby may lack it (standby.go). Unheard, the store admitted such a
// claim, and after a failover its retry ran the call again
// (TestCancelledStandbyWaitIsHeardWhateverClientMinMessages). Set for the transaction, it
// holds during its COMMIT (the server restores a transaction's settings after the commit is
// recorded and waited for).
const durable = `CASE WHEN current_setting('synchronous_commit') IN ('off', 'local') THEN set_config('synchronous_commit', 'on', true) IS NOT NULL ELSE true END` +
	` AND CASE WHEN current_setting('client_min_messages') = 'error' THEN set_config('client_min_messages', 'warning', true) IS NOT NULL ELSE true END`

// idleLimit bounds, on the server, how long a write transaction of the store's may wait for
// its next round trip: its gaps are the engine's work in this process, far below a second.
// A connection whose network stopped carrying its bytes without closing (a NAT's or
// firewall's state for it lost, a partition) never tells the server it is gone: its backend
// waits in the transaction, holding the intent's lock, until the server's TCP keepalive
// gives up (over two hours with Linux's defaults), and every attempt of that intent, the
// holder's retry of its outcome included, waited for that lock in vain
// (TestBlackholedTransactionReleasesTheIntent). Ten seconds is well inside the default lease.
const idleLimit = "10s"

// readable is true, and sets, for the rest of the transaction, bytea_output to hex where the
// session has another and DateStyle to ISO where its output is another. pgx reads results
// sent as text (the query modes exec and simple_protocol, which a pooler in transaction mode
// may need: docs/postgres.md) in those forms only. At escape (a role's or a database's
// setting kept for old clients) a record read failed ("invalid hex format"): the ledger took
// claims and outcomes it could not read again, every duplicate was refused store_error rather
// than replayed, and a commit that reads its claim could not be recorded
// (TestByteaOutputEscapeIsReadable). At German, SQL or Postgres every read of the server's
// clock failed ("invalid PostgreSQL date/time value"): no call was admitted
// (TestDateStyleOfTheSessionIsReadable). The first statement of every transaction carries it,
// that of a one-statement write (specLock) too, and so does each other statement that reads a
// body or the clock.
const readable = `CASE WHEN current_setting('bytea_output') <> 'hex' THEN set_config('bytea_output', 'hex', true) IS NOT NULL ELSE true END` +
	` AND CASE WHEN current_setting('DateStyle') NOT LIKE 'ISO%' THEN set_config('DateStyle', 'ISO', true) IS NOT NULL ELSE true END`

// bounded is true, and sets idle_in_transaction_session_timeout to idleLimit for the rest of
// the transaction where the session has none (a role's, a database's or the URL's setting is
// kept). The first statement of every write transaction carries it, with durable.
const bounded = `CASE WHEN current_setting('idle_in_transaction_session_timeout') = '0' THEN set_config('idle_in_transaction_session_timeout', '` + idleLimit + `', true) IS NOT NULL ELSE true END`

// start queues, right after BEGIN, the read of the clock and of the transaction id (known
// before COMMIT is sent, so a lost acknowledgement can be resolved), unless that is queued
// already.
func (t *tx) start() {
	if t.unstarted {
		t.unstarted = false
		t.pending.Queue("SELECT clock_timestamp(), txid_current() WHERE " + durable + " AND " + bounded + " AND " + readable + t.s.pinned).QueryRow(func(r pgx.Row) error { return t.scanNow(r, &t.xid) })
	}
}

// queue queues a statement after the transaction's start.
func (t *tx) queue(sql string, args ...any) *pgx.QueuedQuery {
	t.start()
	return t.pending.Queue(sql, args...)
}

// send flushes the queued writes and then q, in one round trip. A speculative transaction
// never sends: anything it would have to ask the server ends the speculation.
func (t *tx) send(q func(b *pgx.Batch)) error {
	if t.spec {
		return t.abandon()
	}
	if t.err != nil {
		return t.err
	}
	t.start()
	b := &t.pending
	if q != nil {
		q(b)
	}
	if b.Len() == 0 {
		return nil
	}
	err := t.conn.SendBatch(t.ctx, b).Close()
	t.pending = pgx.Batch{}
	if err != nil {
		t.err = err
		return err
	}
	if !t.begun {
		t.begun = true
		t.now = t.now.UTC()
		if t.write {
			t.s.at("begin", t.pid)
		} else {
			t.s.at("view", t.pid)
		}
	}
	return nil
}

// Now is the database's clock when the transaction began. If it is asked before any read, it
// costs the round trip that begins the transaction; a failure there is returned by the next
// call (and by Update).
func (t *tx) Now() time.Time {
	if t.spec {
		if t.specIntent == "" {
			_ = t.abandon() // no claim to reckon the clock from
		}
		return t.now
	}
	if !t.begun && t.err == nil {
		_ = t.send(nil)
	}
	return t.now
}

// lock queues the intent's advisory lock (once per transaction). Queued ahead of the read
// that follows, it is granted before that read's snapshot is taken.
func (t *tx) lock(intent string) {
	if !t.write || t.locked[intent] {
		return
	}
	if t.spec {
		_ = t.abandon() // only the cached claim's intent, locked by its Get
		return
	}
	if t.locked == nil {
		t.locked = map[string]bool{}
	}
	t.locked[intent] = true
	key := lockKey(t.s.schema, "intent", intent)
	// The lease clock is read again once the lock is granted (the function in FROM runs
	// before the select list): a transaction that waited for the lock must not judge or
	// grant a lease with the time it started waiting. The first lock of a transaction also
	// reads its id, in place of start.
	if t.unstarted {
		t.unstarted = false
		t.pending.Queue("SELECT clock_timestamp(), txid_current() FROM pg_advisory_xact_lock($1) WHERE "+durable+" AND "+bounded+" AND "+readable+t.s.pinned, key).QueryRow(func(r pgx.Row) error {
			return t.scanNow(r, &t.xid)
		})
		return
	}
	t.queue("SELECT clock_timestamp() FROM pg_advisory_xact_lock($1)", key).QueryRow(func(r pgx.Row) error {
		return t.scanNow(r)
	})
}

// scanNow scans the clock (and more) read once an intent's lock was granted.
func (t *tx) scanNow(r pgx.Row, more ...any) error {
	var now time.Time
	if err := r.Scan(append([]any{&now}, more...)...); err != nil {
		return err
	}
	t.now, t.nowAt = now.UTC(), time.Now()
	t.s.clock.Store(&clockReading{t.now, t.nowAt})
	return nil
}

// decodeRecord decodes a row's body. A body that does not decode is reported with the way
// out: the effect's fate must be checked in the real system before the row is removed.
func (t *tx) decodeRecord(intent string, body []byte) (*fence.Record, error) {
	rec := &fence.Record{}
	err := fence.DecodeRecord(body, rec) // rec keeps pieces of body, which is its own
	if err == nil && rec.Intent != intent {
		err = fmt.Errorf("it holds a record of %q", rec.Intent)
	}
	if err != nil {
		return nil, &fence.UnreadableError{Intent: intent, Err: fmt.Errorf("postgres ledger: the record of intent %q is corrupt (%v); the call that read it was not run. Its effect may have happened already, and the next attempt runs once the row is gone: check in the real system, then remove the row: DELETE FROM %s.effectfence_records WHERE intent = %s",
			intent, err, pgx.Identifier{t.s.schema}.Sanitize(), quoteLiteral(intent))}
	}
	return rec, nil
}

// quoteLiteral spells s as an SQL string literal that reads as s whatever the session's
// standard_conforming_strings: a plain '…' literal where s has no backslash, an escape string
// (E'…', backslashes doubled) where it has one. A plain literal's backslash is an escape
// character in a session with standard_conforming_strings off (the URL's, the role's or the
// database's setting): before 2026-12-07 the pin of a schema named `…_\led` set the path to
// `…_led`, another schema, whose ledger the store then read and wrote
// (TestBackslashSchemaUnderNonConformingStrings).
func quoteLiteral(s string) string {
	q := strings.ReplaceAll(s, "'", "''")
	if !strings.Contains(s, `\`) {
		return "'" + q + "'"
	}
	return "E'" + strings.ReplaceAll(q, `\`, `\\`) + "'"
}

// unholdable reports whether a text column cannot hold s: it has a NUL or is not valid UTF-8.
// No row has such a name (the engine refuses it in every request), and asking for one would
// be an encoding error (SQLSTATE 22021): a query of it answers as for a name never used, as
// the other stores do.
func unholdable(s string) bool {
	return strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s)
}

// Get reads the intent's record; in an Update it first takes the intent's lock, so the record
// cannot change until this transaction ends.
func (t *tx) Get(intent string) (*fence.Record, error) {
	if unholdable(intent) {
		return nil, nil
	}
	if t.spec {
		return t.specGet(intent)
	}
	t.lock(intent)
	var body []byte
	found := false
	var learn func() error
	err := t.send(func(b *pgx.Batch) {
		if t.write && t.token == 0 {
			// The next fencing token travels with the read, after the intent's lock, so a
			// later claim of this intent always gets a larger token.
			b.Queue(`SELECT (SELECT body FROM effectfence_records WHERE intent = $1), nextval('effectfence_token')`, intent).QueryRow(func(r pgx.Row) error {
				var got *[]byte
				if err := r.Scan(&got, &t.token); err != nil {
					return err
				}
				if got != nil {
					found, body = true, *got
				}
				return nil
			})
		} else {
			b.Queue("SELECT body FROM effectfence_records WHERE intent = $1", intent).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					found = true
					if err := rows.Scan(&body); err != nil {
						return err
					}
				}
				return rows.Err()
			})
		}
		learn = t.queuePrefetch(b)
	})
	if err != nil {
		return nil, err
	}
	if learn != nil {
		if err := learn(); err != nil {
			return nil, err
		}
	}
	if t.write {
		if t.state == nil {
			t.state = map[string]fence.State{}
		}
		t.state[intent] = fence.StateNone
	}
	if t.landed != nil && !t.dropCounters && intent == t.landed.intent {
		switch {
		case found && bytes.Equal(body, t.landed.body):
			t.dropCounters = true // a lost speculative commit landed, its counters with it
			t.s.at("landed", t.pid)
		case t.landed.shard != "":
			// Its record may have been changed since by another process (an operator's
			// clear): its connection's counters row says whether it landed (doubt.go).
			// Before 2026-12-07 it was taken as not landed, and its counters were added
			// again (TestCommitLostAndClearedElsewhereCountsOnce).
			added, earlier, err := t.stmtAdded()
			if err != nil {
				return nil, err
			}
			t.earlier = earlier
			if added {
				t.dropCounters = true
				t.s.at("landed", t.pid)
			}
		}
	}
	if !found {
		return nil, nil
	}
	rec, err := t.decodeRecord(intent, body)
	if t.write {
		if err == nil {
			t.state[intent] = rec.State
		} else {
			delete(t.state, intent) // a row, of no known state
		}
	}
	return rec, err
}

// earlierAttempt is what a transaction knows of the lost speculative commit it follows up,
// whose record it found changed: recorded, not recorded, or unknown.
type earlierAttempt int

const (
	earlierNone earlierAttempt = iota // no lost commit of the intent, or one not recorded
	earlierLanded
	earlierUnknown
)

// EarlierAttempt implements fence.EarlierAttempt. The lost speculative commit this
// transaction follows up was recorded (its counters are in its connection's row) before
// another process changed the intent's record, or nothing tells whether it was (a commit
// that carried no counters leaves the row as it was either way). Otherwise a transaction of
// this store that wrote the same outcome, its COMMIT's answer lost, landed (its doubt was
// settled so: txid_status), or may have (its doubt is still open, or the server can no
// longer tell); before 2026-12-07 a retry refused after such a commit had landed said "the
// intent's record is unchanged" (TestCommitInDoubtClearedElsewhereSaysItLanded).
func (t *tx) EarlierAttempt(intent string, token uint64, nonce string) (landed, maybe bool) {
	if t.landed != nil && intent == t.landed.intent {
		return t.earlier == earlierLanded, t.earlier == earlierUnknown
	}
	return t.s.doubts.earlier(report{intent, token, nonce})
}

// stmtAdded says whether the lost speculative commit t.landed added its counters to its
// connection's row, and what that says of the commit. The intent's lock is held: the
// statement ran before it was granted, or will find the record changed. A row that holds
// neither what it held before the statement nor that plus the statement's counters says
// nothing; the counters are then not added, lest they count twice.
func (t *tx) stmtAdded() (bool, earlierAttempt, error) {
	var row [10]*int64
	err := t.send(func(b *pgx.Batch) {
		b.Queue(`SELECT admitted, reclaimed, replayed, coalesced, stale, race, in_flight, prior_failure, conflict, lease_lost FROM effectfence_counters WHERE shard = $1`, t.landed.shard).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&row[0], &row[1], &row[2], &row[3], &row[4], &row[5], &row[6], &row[7], &row[8], &row[9]); err != nil {
					return err
				}
			}
			return rows.Err()
		})
	})
	if err != nil {
		return false, earlierNone, err
	}
	earlier := earlierUnknown
	switch {
	case t.landed.delta.IsZero():
	case rowHolds(row, t.landed.base.Add(t.landed.delta)):
		earlier = earlierLanded
	case rowHolds(row, t.landed.base):
		earlier = earlierNone
	}
	return row[0] != nil && !rowHolds(row, t.landed.base), earlier, nil
}

// ends says whether a write leaving intent in state next ends an in-flight claim, whose
// waiters (see Store.Watch) must then be notified. The write's statement does it (see
// notifying): the notification is delivered at commit, only if someone waits, since a NOTIFY
// serialises commits server-wide and ledgers nobody waits on should never pay for it.
func (t *tx) ends(intent string, next fence.State) bool {
	prev, known := t.state[intent]
	return (!known || prev == fence.StateInFlight) && next != fence.StateInFlight
}

// recordSQL is the statement of a record write (its first parameter is the intent), with
// tail as the outer query (notify, or nothing) and counters (an upsert of the counters row)
// folded in. A data-modifying WITH runs to completion whatever the outer query reads.
func recordSQL(write, tail, counters string) string {
	if tail == "" && counters == "" {
		return write
	}
	s := "WITH w AS (" + write + ")"
	if counters != "" {
		s += ", n AS (" + counters + ")"
	}
	if tail == "" {
		tail = "SELECT 1"
	}
	return s + "\n" + tail
}

// notifyTail notifies the waiters of the intent ($1) on the channel its parameter names.
func notifyTail(channel string) string {
	return "SELECT pg_notify(" + channel + ", $1) FROM effectfence_waiters WHERE intent = $1 LIMIT 1"
}

// countersUpsert adds to a counters row; its parameters (shard, then the ten counters in
// fence.Counters order) are numbered from base+1.
func countersUpsert(base int) string {
	p := make([]string, 11)
	for i := range p {
		p[i] = fmt.Sprintf("$%d", base+i+1)
	}
	return `INSERT INTO effectfence_counters AS c (shard, updated_at, admitted, reclaimed, replayed, coalesced, stale, race, in_flight, prior_failure, conflict, lease_lost)
VALUES (` + p[0] + `, clock_timestamp(), ` + strings.Join(p[1:], ", ") + `)
` + countersAdd
}

const (
	// insertRecord writes the record of an intent this transaction found without one (see
	// absent); putRecord any other. An INSERT … ON CONFLICT costs the server a speculative
	// insertion (a check of the primary key first, and one more WAL record to confirm it):
	// 18 µs against 13 for the plain INSERT (EXPLAIN ANALYZE, median of 400 each).
	insertRecord = `INSERT INTO effectfence_records (intent, state, expires_at, cert_hash, body) VALUES ($1, $2, $3, $4, $5)`
	putRecord    = insertRecord + `
ON CONFLICT (intent) DO UPDATE SET state = excluded.state, expires_at = excluded.expires_at, cert_hash = excluded.cert_hash, body = excluded.body`
	deleteRecord = `DELETE FROM effectfence_records WHERE intent = $1`
)

// The statements of record writes: plain, notifying the intent's waiters, and either with the
// counters folded in (see AddCounters).
var (
	addCounters                = countersUpsert(0)
	insertRecordCounters       = recordSQL(insertRecord, "", countersUpsert(5))
	putRecordCounters          = recordSQL(putRecord, "", countersUpsert(5))
	putRecordNotify            = recordSQL(putRecord, notifyTail("$6"), "")
	putRecordNotifyCounters    = recordSQL(putRecord, notifyTail("$6"), countersUpsert(6))
	deleteRecordCounters       = recordSQL(deleteRecord, "", countersUpsert(1))
	deleteRecordNotify         = recordSQL(deleteRecord, notifyTail("$2"), "")
	deleteRecordNotifyCounters = recordSQL(deleteRecord, notifyTail("$2"), countersUpsert(2))
)

// queueRecord queues a record write; fold is its statement with the counters folded in, used
// if AddCounters comes next.
func (t *tx) queueRecord(sql, fold string, args ...any) {
	t.record, t.fold = t.queue(sql, args...), fold
}

func (t *tx) Put(rec *fence.Record) error {
	if !t.write {
		return errReadOnly
	}
	if t.spec && t.specFresh {
		return t.putFresh(rec)
	}
	if t.spec && (rec.Intent != t.specIntent || rec.State != fence.StateDone || t.specDone != nil) {
		return t.abandon() // a speculative transaction only commits the claim it read
	}
	insert := !t.spec && t.absent(rec.Intent)
	var body []byte
	var decoded *fence.Record
	var err error
	if rec.State == fence.StateInFlight && !t.spec {
		// A claim: its commit will read it back from the claim cache (spec.go), which keeps
		// the record decoding these bytes gives, when EncodeRecordDecoded can tell it.
		body, decoded, err = fence.EncodeRecordDecoded(rec, claimMaxBytes)
	} else {
		body, err = fence.EncodeRecord(rec)
	}
	if err != nil {
		return fmt.Errorf("postgres ledger: encoding the record of %q: %w", rec.Intent, err)
	}
	if t.spec {
		t.specDone = body
	} else {
		t.wrote(rec.Intent, rec.State, body, decoded)
	}
	if rec.State != fence.StateInFlight && rec.Token != 0 {
		t.reports = append(t.reports, report{rec.Intent, rec.Token, rec.Nonce})
	}
	var expires, certHash any
	if !rec.ExpiresAt.IsZero() {
		expires = rec.ExpiresAt
	}
	if rec.Cert != nil {
		certHash = rec.Cert.Hash
	}
	t.lock(rec.Intent)
	if t.spec {
		// A claim ends: its waiters are notified, as below.
		t.queueRecord(specPut, specPutCounters, rec.Intent, string(rec.State), expires, certHash, body, t.specClaim, t.now, t.s.channel())
		t.record.Query(func(rows pgx.Rows) error {
			for rows.Next() {
				t.specHit++
			}
			return rows.Err()
		})
		return t.err
	}
	switch {
	case t.ends(rec.Intent, rec.State):
		t.queueRecord(putRecordNotify, putRecordNotifyCounters, rec.Intent, string(rec.State), expires, certHash, body, t.s.channel())
	case insert:
		// Nobody else can have written it meanwhile: every writer takes the intent's lock,
		// which this transaction holds since its Get. Should a row have appeared all the same
		// (written outside effectfence), the INSERT fails and nothing is written.
		t.queueRecord(insertRecord, insertRecordCounters, rec.Intent, string(rec.State), expires, certHash, body)
	default:
		t.queueRecord(putRecord, putRecordCounters, rec.Intent, string(rec.State), expires, certHash, body)
	}
	return t.err
}

// absent says whether this transaction knows that intent has no record: its Get, under the
// intent's lock, found none, and it has not written the intent since.
func (t *tx) absent(intent string) bool {
	if st, ok := t.state[intent]; !ok || st != fence.StateNone {
		return false
	}
	for _, w := range t.written {
		if w.intent == intent {
			return false
		}
	}
	return true
}

func (t *tx) Delete(intent string) error {
	if !t.write {
		return errReadOnly
	}
	if t.spec {
		return t.abandon()
	}
	t.wrote(intent, fence.StateNone, nil, nil)
	t.lock(intent)
	if t.ends(intent, fence.StateNone) {
		t.queueRecord(deleteRecordNotify, deleteRecordNotifyCounters, intent, t.s.channel())
	} else {
		t.queueRecord(deleteRecord, deleteRecordCounters, intent)
	}
	return t.err
}

// sweepCandidates is the first statement of SweepExpired: the intents of the oldest expired
// done records, read from the expiry index in its order (no body is read).
const sweepCandidates = `SELECT intent FROM effectfence_records
	WHERE state = 'done' AND expires_at IS NOT NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2`

// sweepDelete is its second: it takes each candidate's intent lock ($1 the intents, $2 their
// lock keys) if nobody holds it, and deletes those records that are still done and expired
// ($3). A record changed since this statement's snapshot (by a transaction that held the
// lock and committed) is checked again in its latest version, where the WHERE terms on the
// record must hold again: a re-claimed record, or one whose expiry moved, stays.
const sweepDelete = `WITH locked AS MATERIALIZED (
	SELECT c.intent FROM unnest($1::text[], $2::bigint[]) AS c(intent, key) WHERE pg_try_advisory_xact_lock(c.key))
DELETE FROM effectfence_records r USING locked
	WHERE r.intent = locked.intent AND r.state = 'done' AND r.expires_at IS NOT NULL AND r.expires_at <= $3
	RETURNING r.intent`

// SweepExpired (fence.ExpiredSweeper) deletes up to limit expired done records in two round
// trips, whatever their number, and reads none of their bodies. Scan and Delete took a round
// trip per record: each record was locked and read again, body and all, before its delete
// was queued.
//
// Every writer of a record holds the intent's lock from its read to its commit (see lock), so
// the records are deleted under their locks too; but a candidate whose lock another
// transaction holds is skipped (pg_try_advisory_xact_lock) rather than waited for: that
// transaction is deciding on the record from what it read, and may write it again. Waiting
// would gain nothing (the record, still expired, is left for the next sweep, and the gates
// ignore it meanwhile), and taking a batch of locks in one statement while others hold one
// and want another could deadlock. Once the lock is granted, the DELETE's own terms decide
// on the record's latest committed version (see sweepDelete).
//
// What Delete does for each record, this does too: the claim cache forgets the intents
// (wrote). A swept record was done, so no claim ends and no waiter is notified, as with
// Delete after a Get that found it done.
func (t *tx) SweepExpired(before time.Time, limit int) (int, bool, error) {
	if !t.write {
		return 0, false, errReadOnly
	}
	if t.spec {
		return 0, false, t.abandon()
	}
	var intents []string
	err := t.send(func(b *pgx.Batch) {
		b.Queue(sweepCandidates, before, limit).Query(appendIntents(&intents))
	})
	if err != nil || len(intents) == 0 {
		return 0, false, err
	}
	t.s.at("sweep candidates", t.pid)
	keys := make([]int64, len(intents))
	for i, intent := range intents {
		keys[i] = lockKey(t.s.schema, "intent", intent)
	}
	var gone []string
	err = t.send(func(b *pgx.Batch) {
		b.Queue(sweepDelete, intents, keys, before).Query(appendIntents(&gone))
	})
	if err != nil {
		return 0, false, err
	}
	if t.locked == nil {
		t.locked = map[string]bool{}
	}
	for _, intent := range gone {
		t.locked[intent] = true
		t.wrote(intent, fence.StateNone, nil, nil)
	}
	return len(gone), len(intents) == limit, nil
}

// appendIntents reads rows of one text column (intents) onto *dst.
func appendIntents(dst *[]string) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var intent string
			if err := rows.Scan(&intent); err != nil {
				return err
			}
			*dst = append(*dst, intent)
		}
		return rows.Err()
	}
}

// Scan queries the matching records in intent order. In an Update each record is locked and
// read again before fn sees it (and skipped if it no longer matches), so what fn decides on
// cannot change under it.
//
// A Scan without a Limit reads its records through a cursor of the transaction, scanPage rows
// per round trip, and calls fn on each page before it fetches the next: memory stays bounded
// for any ledger size, fn may use the transaction, and every page comes from the one snapshot
// the cursor was declared in (a View's, REPEATABLE READ, holds for all its reads anyway). A
// connection lost between pages fails the Scan: fn has then seen only a part.
//
// Intent order is the order of the intents' bytes, as Go compares strings (Filter.After and
// Match, the memory and SQLite stores), never the database's collation, which may be
// linguistic (en_US: 'a' < 'B', '_x' < 'Z'): see scanQuery.
func (t *tx) Scan(f fence.Filter, fn func(*fence.Record) bool) error {
	if err := f.CheckByExpiry(); err != nil {
		return err
	}
	q, args := scanQuery(f)
	type row struct {
		intent string
		body   []byte
	}
	var got []row
	read := func(rows pgx.Rows) error {
		var r row
		if err := rows.Scan(&r.intent, &r.body); err != nil {
			return err
		}
		got = append(got, r)
		return nil
	}
	use := func() (bool, error) {
		t.s.held(len(got))
		for _, r := range got {
			var rec *fence.Record
			var err error
			if t.write {
				rec, err = t.Get(r.intent)
			} else {
				rec, err = t.decodeRecord(r.intent, r.body)
			}
			var u *fence.UnreadableError
			if errors.As(err, &u) && f.Unreadable != nil {
				f.Unreadable(u)
				continue
			}
			if err != nil {
				return false, err
			}
			if t.write && (rec == nil || !f.Match(rec)) {
				continue
			}
			if !fn(rec) {
				return false, nil
			}
		}
		got = got[:0]
		return true, nil
	}
	if f.Limit > 0 {
		// At most Limit rows, in the order the query chose them in.
		err := t.send(func(b *pgx.Batch) {
			b.Queue(q, args...).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					if err := read(rows); err != nil {
						return err
					}
				}
				return rows.Err()
			})
		})
		if err != nil {
			return err
		}
		_, err = use()
		return err
	}
	return t.paged("records", q, args, read, use)
}

// scanPage is how many rows Scan and Events fetch from their cursor in one round trip, and so
// how many they hold at once (Store.scanPage, in tests, makes pages smaller).
const scanPage = 256

// scanFirstPage is how many rows the first round trip of a cursor fetches, and scanPageBytes
// about how many bytes of rows a round trip fetches after it: a done record holds its result
// whole, and a page of 256 large ones was held at once (export, verify, ls and stats of a
// ledger of large results). Each fetch after the first asks for as many rows as fit
// scanPageBytes at the size of the rows fetched so far, from 1 to scanPage.
const (
	scanFirstPage = 4
	scanPageBytes = 8 << 20
)

// paged runs the query q through a cursor of the transaction: each round trip fetches up to
// scanPage rows, read is called on each row as it arrives, and use once the page is read and
// its rows are closed (so it may use the transaction); use returns false to stop. The cursor is
// declared in the round trip of the first page, and closed when the scan ends before the
// transaction does.
//
// shape names the columns q selects: the cursor's name carries it. pgx caches each FETCH's
// description by its text, and a FETCH sent while a cursor is open is described with that
// cursor's columns: a FETCH of the same text on a cursor of another query (records: intent,
// body; events: id, intent, body) was then bound with the wrong columns ("bind message has 3
// result formats but query has 2 columns"). The first FETCH of a fixed length, sent beside its
// DECLARE, was described before the cursor existed, with no columns, so a fixed length never
// met it; fetches of varying length do (TestStoresAgreePostgres). Their lengths are powers of
// two, so a connection caches a few FETCH texts per shape.
func (t *tx) paged(shape, q string, args []any, read func(pgx.Rows) error, use func() (bool, error)) error {
	t.cursors++
	name := fmt.Sprintf("effectfence_%s_%d", shape, t.cursors)
	page := scanPage
	if t.s.scanPage > 0 {
		page = t.s.scanPage
	}
	count := min(page, scanFirstPage)
	rowsSeen, bytesSeen := 0, 0
	for first := true; ; first = false {
		n := 0
		err := t.send(func(b *pgx.Batch) {
			if first {
				b.Queue("DECLARE "+name+" NO SCROLL CURSOR FOR "+q, args...)
			}
			b.Queue(fmt.Sprintf("FETCH FORWARD %d FROM %s", count, name)).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					n++
					for _, v := range rows.RawValues() {
						bytesSeen += len(v)
					}
					if err := read(rows); err != nil {
						return err
					}
				}
				return rows.Err()
			})
		})
		if err != nil {
			return err
		}
		more, err := use()
		if err != nil {
			return err
		}
		if !more || n < count {
			// Sent with the transaction's next statement, or not at all: its end closes it.
			t.pending.Queue("CLOSE " + name)
			return nil
		}
		rowsSeen += n
		count = page
		if bytesSeen > 0 {
			fit := max(1, min(int64(page), int64(scanPageBytes)*int64(rowsSeen)/int64(bytesSeen)))
			count = 1 << (bits.Len64(uint64(fit)) - 1) // the power of two at or below it
		}
	}
}

// scanQuery is Scan's query of the records f matches. A search for states that are all not
// done says so in the index's own terms (state <> 'done'), so that the plan PostgreSQL caches
// for the statement, made without knowing the states, can use effectfence_records_open (see
// recordIndexes).
//
// Intents compare by their bytes: After and the order by COLLATE "C", which is byte order
// whatever the database's collation. No index has that order (the primary key has the
// column's collation, and the planner matches collations, not orders, so not even in a
// database collated C), so ORDER BY intent COLLATE "C" of the whole table is a sort on the
// server, which spills to a temporary file there on a big ledger: 143 ms and a 30 MB file for
// 100k records, where the primary key's index scan took 20 ms (PostgreSQL 15, C.UTF-8). Scan
// once read every row of a query without a Limit and sorted them in Go, to spare that sort,
// which held the whole ledger in the client's memory; it now reads them through a cursor, a
// page at a time, in the order the server sorted them in. A query with a Limit pays the sort
// on the rows it selects (a top-N sort; a ByExpiry scan reads the expiry index in its order,
// which needs none, as SweepExpired does); paging the whole table by After and Limit would
// scan the table once per page.
func scanQuery(f fence.Filter) (string, []any) {
	var where []string
	var args []any
	if f.After != "" {
		args = append(args, f.After)
		where = append(where, fmt.Sprintf(`intent COLLATE "C" > $%d`, len(args)))
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		open := true
		for i, s := range f.States {
			states[i] = string(s)
			open = open && s != fence.StateDone
		}
		args = append(args, states)
		where = append(where, fmt.Sprintf("state = ANY($%d)", len(args)))
		if open {
			where = append(where, "state <> 'done'")
		}
	}
	if !f.ExpiresBefore.IsZero() {
		args = append(args, f.ExpiresBefore)
		where = append(where, fmt.Sprintf("expires_at IS NOT NULL AND expires_at <= $%d", len(args)))
	}
	if f.ByExpiry && f.ExpiresBefore.IsZero() {
		where = append(where, "expires_at IS NOT NULL") // the expiry index holds only these
	}
	q := "SELECT intent, body FROM effectfence_records"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	switch {
	case f.ByExpiry:
		// The expiry index's own order: the index scan stops after Limit entries.
		args = append(args, f.Limit)
		q += fmt.Sprintf(` ORDER BY expires_at LIMIT $%d`, len(args))
	case f.Limit > 0:
		args = append(args, f.Limit)
		q += fmt.Sprintf(` ORDER BY intent COLLATE "C" LIMIT $%d`, len(args))
	default:
		q += ` ORDER BY intent COLLATE "C"`
	}
	return q, args
}

// CertByHash scans the records table: no index maps cert hashes (see recordIndexes: one cost
// every commit an index insertion at a random leaf, for a lookup no command makes). Of
// several matches it answers the first in byte order of the intents (COLLATE "C"), as the
// other stores do, whatever the database's collation; the plan is the same (a sort of the
// matches).
func (t *tx) CertByHash(hash string) (*fence.Record, error) {
	var intent string
	var body []byte
	found := false
	err := t.send(func(b *pgx.Batch) {
		b.Queue("SELECT intent, body FROM effectfence_records WHERE cert_hash = $1 AND state = 'done' ORDER BY intent COLLATE \"C\" LIMIT 1", hash).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				found = true
				if err := rows.Scan(&intent, &body); err != nil {
					return err
				}
			}
			return rows.Err()
		})
	})
	if err != nil || !found {
		return nil, err
	}
	return t.decodeRecord(intent, body)
}

func toUint(v int64, what string) (uint64, error) {
	if v < 0 {
		return 0, fmt.Errorf("postgres ledger: %s is negative (%d): the ledger's tables were changed outside effectfence", what, v)
	}
	return uint64(v), nil
}

func toInt(v uint64, what string) (int64, error) {
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("postgres ledger: %s %d does not fit a bigint", what, v)
	}
	return int64(v), nil
}

// DomainSeq reads a domain (and the floor, which an absent domain reads as). Within one
// transaction every read of a domain answers what the first read found, or what this
// transaction set: the write is a compare-and-swap against that first read, so a transaction
// never decides on two different values of one domain.
func (t *tx) DomainSeq(domain string) (uint64, bool, error) {
	if unholdable(domain) {
		// No row can have this name (see unholdable): it reads as the floor.
		f, err := t.DomainFloor()
		return f, false, err
	}
	if d, ok := t.domains[domain]; ok {
		if d.found {
			return d.seq, true, nil
		}
		return d.floor, false, nil
	}
	var seq *int64
	var floor int64
	err := t.send(func(b *pgx.Batch) {
		b.Queue(t.domainQuery(domain), domain).QueryRow(func(r pgx.Row) error { return r.Scan(&seq, &floor) })
	})
	if err != nil {
		return 0, false, err
	}
	d, err := t.learnDomain(domain, seq, floor)
	if err != nil {
		return 0, false, err
	}
	if d.found {
		return d.seq, true, nil
	}
	return d.floor, false, nil
}

// domainQuery reads a domain's row and the floor; a write transaction that lost a swap on it
// before, or on a domain hot with such losses, locks the row.
func (t *tx) domainQuery(domain string) string {
	if t.write && (t.contended || t.s.isHot(domain)) {
		return `SELECT (SELECT seq FROM effectfence_domains WHERE domain = $1 FOR UPDATE), (SELECT value FROM effectfence_meta WHERE key = 'floor')`
	}
	return `SELECT (SELECT seq FROM effectfence_domains WHERE domain = $1), (SELECT value FROM effectfence_meta WHERE key = 'floor')`
}

// learnDomain records a domain as this transaction first read it.
func (t *tx) learnDomain(domain string, seq *int64, floor int64) (domainState, error) {
	d := domainState{found: seq != nil}
	var err error
	if d.floor, err = toUint(floor, "the domain floor"); err != nil {
		return d, err
	}
	if seq != nil {
		if d.seq, err = toUint(*seq, "the sequence of domain "+domain); err != nil {
			return d, err
		}
	}
	if t.domains == nil {
		t.domains = map[string]domainState{}
	}
	t.domains[domain] = d
	return d, nil
}

// PrefetchDomain (fence.DomainPrefetcher) queues a read of domain to travel with the next Get,
// after that Get's lock and read, saving DomainSeq its own round trip. What it reads is the
// transaction's first read of the domain, as if DomainSeq had been called right after Get.
func (t *tx) PrefetchDomain(domain string) {
	if _, ok := t.domains[domain]; ok {
		return
	}
	for _, d := range t.prefetch {
		if d == domain {
			return
		}
	}
	t.prefetch = append(t.prefetch, domain)
}

// queuePrefetch queues the prefetched domains' reads on b; learn records what they found once
// the batch has run.
func (t *tx) queuePrefetch(b *pgx.Batch) (learn func() error) {
	if len(t.prefetch) == 0 {
		return nil
	}
	type got struct {
		domain string
		seq    *int64
		floor  int64
	}
	rows := make([]got, len(t.prefetch))
	for i, domain := range t.prefetch {
		g := &rows[i]
		g.domain = domain
		b.Queue(t.domainQuery(domain), domain).QueryRow(func(r pgx.Row) error { return r.Scan(&g.seq, &g.floor) })
	}
	t.prefetch = t.prefetch[:0]
	return func() error {
		for _, g := range rows {
			if _, err := t.learnDomain(g.domain, g.seq, g.floor); err != nil {
				return err
			}
		}
		return nil
	}
}

// SetDomainSeq swaps the domain's sequence number, expecting what this transaction first read
// (a lost swap aborts the transaction with 40001 and Update decides again). Without a prior
// read it writes unconditionally.
func (t *tx) SetDomainSeq(domain string, seq uint64) error {
	if !t.write {
		return errReadOnly
	}
	if t.spec {
		return t.abandon()
	}
	v, err := toInt(seq, "sequence number")
	if err != nil {
		return err
	}
	d, read := t.domains[domain]
	switch {
	case !read:
		t.queue(`INSERT INTO effectfence_domains (domain, seq) VALUES ($1, $2) ON CONFLICT (domain) DO UPDATE SET seq = excluded.seq`, domain, v)
	case d.found:
		t.queue(`WITH w AS (UPDATE effectfence_domains SET seq = $2 WHERE domain = $1 AND seq = $3 RETURNING 1)
SELECT effectfence_must((SELECT count(*) FROM w), 'domain ' || $1::text)`, domain, v, int64(d.seq))
	default:
		// An absent domain read as the floor: insert only if it is still absent and the floor
		// has not moved.
		t.queue(`WITH w AS (INSERT INTO effectfence_domains (domain, seq)
	SELECT $1, $2 WHERE (SELECT value FROM effectfence_meta WHERE key = 'floor') = $3
	ON CONFLICT (domain) DO NOTHING RETURNING 1)
SELECT effectfence_must((SELECT count(*) FROM w), 'domain ' || $1::text)`, domain, v, int64(d.floor))
		// The insert read the floor as its statement began. If the domain's row was being
		// evicted then, the insert waited for the eviction and, the row gone, inserted: at a
		// number the evicted row had already handed out, since the eviction raised the floor
		// after that read. A statement after the insert sees the raised floor; the floor
		// never falls, so an unmoved floor means no eviction overtook the insert.
		t.queue(`SELECT effectfence_must((SELECT count(*) FROM effectfence_meta WHERE key = 'floor' AND value = $1), 'the domain floor')`, int64(d.floor))
	}
	if t.domains == nil {
		t.domains = map[string]domainState{}
	}
	t.domains[domain] = domainState{seq: seq, found: true, floor: d.floor}
	if read {
		if t.swapped == nil {
			t.swapped = map[string]bool{}
		}
		t.swapped[domain] = true
	}
	return t.err
}

// DeleteDomain removes the domain's row, expecting the value this transaction read.
func (t *tx) DeleteDomain(domain string) error {
	if !t.write {
		return errReadOnly
	}
	if t.spec {
		return t.abandon()
	}
	d, read := t.domains[domain]
	switch {
	case read && d.found:
		t.queue(`WITH w AS (DELETE FROM effectfence_domains WHERE domain = $1 AND seq = $2 RETURNING 1)
SELECT effectfence_must((SELECT count(*) FROM w), 'domain ' || $1::text)`, domain, int64(d.seq))
	case !read:
		t.queue(`DELETE FROM effectfence_domains WHERE domain = $1`, domain)
	}
	if t.domains == nil {
		t.domains = map[string]domainState{}
	}
	floor := d.floor
	if t.floor != nil {
		floor = *t.floor
	}
	t.domains[domain] = domainState{floor: floor}
	return t.err
}

func (t *tx) DomainFloor() (uint64, error) {
	if t.floor != nil {
		return *t.floor, nil
	}
	var v int64
	err := t.send(func(b *pgx.Batch) {
		b.Queue(`SELECT value FROM effectfence_meta WHERE key = 'floor'`).QueryRow(func(r pgx.Row) error { return r.Scan(&v) })
	})
	if err != nil {
		return 0, err
	}
	f, err := toUint(v, "the domain floor")
	if err != nil {
		return 0, err
	}
	t.floor = &f
	return f, nil
}

// SetDomainFloor swaps the floor, expecting the value this transaction read.
func (t *tx) SetDomainFloor(seq uint64) error {
	if !t.write {
		return errReadOnly
	}
	if t.spec {
		return t.abandon()
	}
	v, err := toInt(seq, "floor")
	if err != nil {
		return err
	}
	if t.floor == nil {
		t.queue(`UPDATE effectfence_meta SET value = $1 WHERE key = 'floor'`, v)
	} else {
		t.queue(`WITH w AS (UPDATE effectfence_meta SET value = $1 WHERE key = 'floor' AND value = $2 RETURNING 1)
SELECT effectfence_must((SELECT count(*) FROM w), 'the domain floor')`, v, int64(*t.floor))
	}
	t.floor = &seq
	for d, st := range t.domains {
		if !st.found {
			st.floor = seq
			t.domains[d] = st
		}
	}
	return t.err
}

func (t *tx) NextToken() (uint64, error) {
	if !t.write {
		return 0, errReadOnly
	}
	if t.spec && t.specFresh && !t.specTokens {
		t.specTokens = true
		return fence.PendingToken, nil // the claim's statement draws the token (fence.LateToken)
	}
	if t.token > 0 {
		v := t.token
		t.token = -1 // used: never hand it out twice
		return toUint(v, "the fencing token")
	}
	var v int64
	err := t.send(func(b *pgx.Batch) {
		b.Queue(`SELECT nextval('effectfence_token')`).QueryRow(func(r pgx.Row) error { return r.Scan(&v) })
	})
	if err != nil {
		return 0, err
	}
	return toUint(v, "the fencing token")
}

func (t *tx) AppendEvent(ev fence.Event) error {
	if !t.write {
		return errReadOnly
	}
	if t.spec {
		return t.abandon() // a speculative batch writes one guarded record, nothing unguarded
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("postgres ledger: encoding an event of %q: %w", ev.Intent, err)
	}
	t.queue(`INSERT INTO effectfence_events (at, intent, kind, body) VALUES ($1, $2, $3, $4)`, ev.At, ev.Intent, ev.Kind, body)
	return t.err
}

func (t *tx) Events(intent string, fn func(fence.Event) bool) error {
	return t.EventsSkipping(intent, fn, nil)
}

// EventsSkipping is Events telling unreadable of each event whose body does not decode, and
// going on with the next (fence.EventsSkipping); with unreadable nil such an event ends it
// with its error.
func (t *tx) EventsSkipping(intent string, fn func(fence.Event) bool, unreadable func(*fence.UnreadableEventError)) error {
	if unholdable(intent) {
		return nil // no event names it (see unholdable)
	}
	q, args := `SELECT id, intent, body FROM effectfence_events ORDER BY id`, []any{}
	if intent != "" {
		q, args = `SELECT id, intent, body FROM effectfence_events WHERE intent = $1 ORDER BY id`, []any{intent}
	}
	type row struct {
		id     int64
		intent string
		body   []byte
	}
	var rows []row
	read := func(r pgx.Rows) error {
		var w row
		if err := r.Scan(&w.id, &w.intent, &w.body); err != nil {
			return err
		}
		rows = append(rows, w)
		return nil
	}
	use := func() (bool, error) {
		t.s.held(len(rows))
		for _, w := range rows {
			var ev fence.Event
			if err := json.Unmarshal(w.body, &ev); err != nil {
				bad := &fence.UnreadableEventError{Intent: w.intent, ID: w.id, Err: fmt.Errorf("postgres ledger: audit event %d of intent %q is corrupt (%v): the ledger's tables were changed outside effectfence; to remove it: DELETE FROM %s.effectfence_events WHERE id = %d",
					w.id, w.intent, err, pgx.Identifier{t.s.schema}.Sanitize(), w.id)}
				if unreadable == nil {
					return false, bad
				}
				unreadable(bad)
				continue
			}
			if !fn(ev) {
				return false, nil
			}
		}
		rows = rows[:0]
		return true, nil
	}
	return t.paged("events", q, args, read, use)
}

func (t *tx) DeleteEventsBefore(before time.Time) (int, error) {
	if !t.write {
		return 0, errReadOnly
	}
	var n int64
	err := t.send(func(b *pgx.Batch) {
		b.Queue(`DELETE FROM effectfence_events WHERE at < $1 AND kind <> ALL($2::text[])`, before, fence.KeptForeverKinds()).Exec(func(ct pgconn.CommandTag) error {
			n = ct.RowsAffected()
			return nil
		})
	})
	return int(n), err
}

// AddCounters adds to this connection's own counters row: connections never share one, so
// counting makes no transaction wait.
func (t *tx) AddCounters(d fence.Counters) error {
	if !t.write {
		return errReadOnly
	}
	if t.dropCounters {
		return nil
	}
	shard := "" // a speculative batch's: named once its connection is known (shardArg)
	if t.conn != nil {
		shard = t.s.shard(t.conn.PgConn())
	}
	args, err := counterArgs(shard, d)
	if err != nil {
		return err
	}
	t.delta = t.delta.Add(d)
	t.receipt = true
	// Right after a record write (the engine adds its counters last), the upsert is folded
	// into that write's statement: one statement less for the server and pgx to run.
	if q := t.pending.QueuedQueries; t.record != nil && len(q) > 0 && q[len(q)-1] == t.record {
		t.record.SQL = t.fold
		t.shard(t.record, len(t.record.Arguments))
		t.record.Arguments = append(t.record.Arguments, args...)
		t.record = nil
		return t.err
	}
	t.shard(t.queue(addCounters, args...), 0)
	return t.err
}

// counterArgs are the arguments of countersUpsert adding d to shard.
func counterArgs(shard string, d fence.Counters) ([]any, error) {
	vals := []uint64{d.Admitted, d.Reclaimed, d.Replayed, d.Coalesced, d.Stale, d.Race, d.InFlight, d.PriorFailure, d.Conflict, d.LeaseLost}
	args := []any{shard}
	for _, v := range vals {
		n, err := toInt(v, "counter")
		if err != nil {
			return nil, err
		}
		args = append(args, n)
	}
	return args, nil
}

func (t *tx) Counters() (fence.Counters, error) {
	var v [10]int64
	err := t.send(func(b *pgx.Batch) {
		b.Queue(`SELECT COALESCE(sum(admitted),0)::bigint, COALESCE(sum(reclaimed),0)::bigint, COALESCE(sum(replayed),0)::bigint,
	COALESCE(sum(coalesced),0)::bigint, COALESCE(sum(stale),0)::bigint, COALESCE(sum(race),0)::bigint,
	COALESCE(sum(in_flight),0)::bigint, COALESCE(sum(prior_failure),0)::bigint, COALESCE(sum(conflict),0)::bigint,
	COALESCE(sum(lease_lost),0)::bigint FROM effectfence_counters`).QueryRow(func(r pgx.Row) error {
			return r.Scan(&v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9])
		})
	})
	if err != nil {
		return fence.Counters{}, err
	}
	u := make([]uint64, len(v))
	for i, x := range v {
		if u[i], err = toUint(x, "a counter"); err != nil {
			return fence.Counters{}, err
		}
	}
	return fence.Counters{Admitted: u[0], Reclaimed: u[1], Replayed: u[2], Coalesced: u[3], Stale: u[4], Race: u[5],
		InFlight: u[6], PriorFailure: u[7], Conflict: u[8], LeaseLost: u[9]}, nil
}

// Filing reads the state and cert hash every record is filed under (fence.Filing), through a
// cursor, a page at a time, in the transaction's snapshot.
func (t *tx) Filing(fn func(intent string, state fence.State, certHash string) bool) error {
	type row struct {
		intent, state string
		hash          *string
	}
	var rows []row
	read := func(r pgx.Rows) error {
		var w row
		if err := r.Scan(&w.intent, &w.state, &w.hash); err != nil {
			return err
		}
		rows = append(rows, w)
		return nil
	}
	use := func() (bool, error) {
		t.s.held(len(rows))
		for _, w := range rows {
			h := ""
			if w.hash != nil {
				h = *w.hash
			}
			if !fn(w.intent, fence.State(w.state), h) {
				return false, nil
			}
		}
		rows = rows[:0]
		return true, nil
	}
	return t.paged("filing", "SELECT intent, state, cert_hash FROM effectfence_records", nil, read, use)
}
