package postgres

// Counters of a commit whose answer was lost.
//
// The engine sends its pending counters with a write (Tx.AddCounters), and puts them back
// among its pending ones when the write fails, to send them again with the next. A commit
// whose answer is lost and that the store cannot settle (CommitUnknownError) may have landed,
// counters and all: sent again, they would be counted twice. So the store keeps them itself
// (the error says so: fence.CountersKept) as a doubt, and settles the doubt once the database
// answers, at the start of a later Update: if the commit landed, its counters did; if it
// surely did not, the store adds them then; while that cannot be told yet, it waits.

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectfence/effectfence/pkg/fence"
)

// doubt is a commit whose answer was lost, and the counters it carried.
type doubt struct {
	// xid is the transaction whose COMMIT was sent (0: none was), shard its receipt (see
	// resolve), at when the doubt was kept.
	xid   int64
	shard string
	at    time.Time
	// A one-statement commit (spec.go): the intent, the done record's body it writes and the
	// claim's body it requires. It landed if the record is that body; it may still land
	// while the record is the claim (the statement may be waiting for the intent's lock).
	intent      string
	body, claim []byte
	// A one-statement claim (spec.go): its body around the token, and the server time
	// after which it can no longer land.
	cut   [2][]byte
	until time.Time
	delta fence.Counters
	// A one-statement claim or commit whose connection died with its answer: the counters
	// row of that connection, and what it held before the statement (connCounted). The
	// statement adds delta to that row only if it writes its record, and nothing writes the
	// row after it (its connection is gone): the row holding stmtBase plus delta says the
	// statement landed, whatever became of its record since; holding stmtBase, that it did
	// not.
	stmtShard string
	stmtBase  fence.Counters
	// seq names the counter shard its counters are added to (settle), once: an add whose
	// answer is lost is tried again, and must not count them a second time.
	seq int64
	// reports are the outcomes a transaction's doubt wrote (see EarlierAttempt).
	reports []report
}

// report names an outcome a transaction wrote: the intent, and the ticket (token and nonce)
// of the claim whose record it ended.
type report struct {
	intent string
	token  uint64
	nonce  string
}

// reportFate is what the store learned of a report its doubt wrote: whether it landed
// (sure: it did; otherwise the server could no longer tell), and when that was learned.
type reportFate struct {
	sure bool
	at   time.Time
}

// doubts are the commits this store has not settled yet.
type doubts struct {
	mu   sync.Mutex // held by the one settling: a doubt's counters are added once
	list []doubt
	n    atomic.Int64
	seq  atomic.Int64
	// next is when (UnixNano) settling may be tried again after a try that left doubts
	// open: each try costs a round trip per doubt, which every Update would otherwise pay
	// while one stays open.
	next atomic.Int64

	// rmu guards open and fates, which a transaction asks while mu may be held by a settle
	// waiting for the server. open counts the open doubts' reports; fates are the reports of
	// doubts settled as landed, or as beyond the server's knowledge, for foldAge.
	rmu   sync.Mutex
	open  map[report]int
	fates map[report]reportFate
}

// earlier says what the store knows of an earlier attempt of r: it landed (a doubt of this
// store settled so), or it may have (its doubt is open, or the server could no longer tell).
func (d *doubts) earlier(r report) (landed, maybe bool) {
	d.rmu.Lock()
	defer d.rmu.Unlock()
	if f, ok := d.fates[r]; ok {
		return f.sure, !f.sure
	}
	return false, d.open[r] > 0
}

// opened counts rs among the open doubts' reports.
func (d *doubts) opened(rs []report) {
	if len(rs) == 0 {
		return
	}
	d.rmu.Lock()
	defer d.rmu.Unlock()
	if d.open == nil {
		d.open = map[report]int{}
	}
	for _, r := range rs {
		d.open[r]++
	}
}

// closed takes rs out of the open doubts' reports, and keeps their fate when the doubt
// landed (fate 1) or nothing can tell (fate -1); 0: it did not land.
func (d *doubts) closed(rs []report, fate int) {
	if len(rs) == 0 {
		return
	}
	d.rmu.Lock()
	defer d.rmu.Unlock()
	now := time.Now()
	for r, f := range d.fates {
		if now.Sub(f.at) > foldAge {
			delete(d.fates, r)
		}
	}
	for _, r := range rs {
		// A report may close without having opened (keep's commit that carried no
		// counters): open may be nil then, and an assignment to it panicked.
		if n := d.open[r]; n > 1 {
			d.open[r] = n - 1
		} else {
			delete(d.open, r)
		}
		if fate != 0 {
			if d.fates == nil {
				d.fates = map[report]reportFate{}
			}
			d.fates[r] = reportFate{sure: fate > 0, at: now}
		}
	}
}

// doubtTry bounds a try at settling the doubts.
const doubtTry = 5 * time.Second

// doubtRetry is how long a try at settling that left doubts open holds the next one off.
const doubtRetry = time.Second

// addCountersOnce writes a doubt's counters as a shard of their own, unless it is there:
// the add is tried again when its answer is lost. (The hourly fold moves an old shard into
// "folded"; a try an hour after the lost one would add them again. Tries come seconds apart.)
var addCountersOnce = strings.Replace(addCounters, countersAdd, "ON CONFLICT (shard) DO NOTHING", 1)

// keep makes err, when it is a CommitUnknownError of an Update that carried counters, a
// doubt this store settles: d describes a one-statement commit (its body set), else the
// doubt is err's transaction. The error returned then says the store keeps the counters.
func (s *Store) keep(err error, d doubt) error {
	cu, ok := err.(CommitUnknownError)
	if !ok {
		return err
	}
	if d.body == nil && d.cut[0] == nil {
		d.xid, d.shard, d.delta, d.reports = cu.Xid, cu.shard, cu.delta, cu.reports // spec.go sets its own
	}
	d.at = time.Now()
	if d.delta.IsZero() || (d.xid == 0 && d.body == nil && d.cut[0] == nil) {
		// No counters to settle: no doubt is kept, and nothing will tell whether its
		// reports landed.
		s.doubts.closed(d.reports, -1)
		return err
	}
	d.seq = s.doubts.seq.Add(1)
	s.doubts.mu.Lock()
	s.doubts.list = append(s.doubts.list, d)
	s.doubts.n.Store(int64(len(s.doubts.list)))
	s.doubts.next.Store(0) // the next Update tries at once
	s.doubts.mu.Unlock()
	s.doubts.opened(d.reports)
	cu.kept = true
	return cu
}

// ClaimInDoubt says whether the store still doubts a one-statement claim of intent whose
// answer was lost (fence.ClaimDoubter). Such a doubt is settled by finding the claim in the
// ledger, so the engine waits for it to be settled before it releases that claim: a claim
// released first would read as never recorded, and the counters it carried would be added
// a second time.
func (s *Store) ClaimInDoubt(intent string) bool {
	if s.doubts.n.Load() == 0 {
		return false
	}
	s.doubts.mu.Lock()
	defer s.doubts.mu.Unlock()
	for _, d := range s.doubts.list {
		if d.cut[0] != nil && d.intent == intent {
			return true
		}
	}
	return false
}

// sameClaim says whether body, the intent's record now, is the claim spliced from cut after
// others changed it: its nonce, which is new to every claim, is the claim's. Another process
// marks a claim unknown once its lease lapsed (the database may stay away that long), which
// rewrites the record; read as "not recorded", the counters the claim carried were added a
// second time.
func sameClaim(body []byte, cut [2][]byte) bool {
	if body == nil {
		return false
	}
	var claim, now fence.Record
	spliced := append(append(append([]byte(nil), cut[0]...), '1'), cut[1]...)
	if fence.DecodeRecord(spliced, &claim) != nil || claim.Nonce == "" || fence.DecodeRecord(bytes.Clone(body), &now) != nil {
		return false
	}
	return now.Intent == claim.Intent && now.Nonce == claim.Nonce && now.Token != 0
}

// settleDoubts settles what can be settled of the doubts, unless another call is at it or,
// unless now, a try left doubts open less than doubtRetry ago.
//
// Only a try the server answered holds the next one off (it could not tell yet, and every
// Update would otherwise pay a round trip per doubt for nothing). A try that could not ask
// (the database away) stops at the first such doubt and leaves the next Update free to try
// at once: the server may be back by then, and nothing is saved by waiting (an Update made
// while it is away fails anyway). Held off instead, the doubts of a process that wrote while
// the database was away (a background release of a lost claim, a heartbeat) stayed unsettled
// for a second after it came back.
//
// A try takes at most doubtTry, and ends with ctx, the caller's: it runs at the start of the
// caller's Update, and a caller's bound (a renewal's try, serve's wait for the ledger, the
// few seconds a stopping process gives its last writes) holds for all the Update does. A
// doubt left open by a try so ended is settled by a later one. Before, a try gave itself
// 5 s whatever the caller's deadline: with the server frozen, a renewal bounded to 1 s
// returned after 5 s, and a stopping engine's Close, which gives its writes 5 s, took 12 s
// (TestSettlingDoubtsKeepsTheCallersDeadline).
func (s *Store) settleDoubts(ctx context.Context, now bool) {
	if !now && time.Now().UnixNano() < s.doubts.next.Load() {
		return
	}
	if !s.doubts.mu.TryLock() {
		return
	}
	defer s.doubts.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, doubtTry)
	defer cancel()
	var open []doubt
	answered := true
	for i, d := range s.doubts.list {
		r := s.settle(ctx, d)
		switch r {
		case doubtUnasked:
			open, answered = append(open, s.doubts.list[i:]...), false
		case doubtUndecided:
			open = append(open, d)
		case doubtLanded:
			s.doubts.closed(d.reports, 1)
		case doubtUntold:
			s.doubts.closed(d.reports, -1)
		default:
			s.doubts.closed(d.reports, 0)
		}
		if r == doubtUnasked {
			break
		}
	}
	s.doubts.list = open
	s.doubts.n.Store(int64(len(open)))
	if len(open) > 0 && answered {
		s.doubts.next.Store(time.Now().Add(doubtRetry).UnixNano())
	}
}

// What a try at settling a doubt came to.
const (
	doubtSettled   = iota
	doubtUndecided // the server answered, but cannot tell yet
	doubtUnasked   // the server could not be asked
	doubtLanded    // settled: the commit landed
	doubtUntold    // settled: the server can no longer tell whether it landed
)

// settle asks the server about d, and adds its counters if its commit did not land.
func (s *Store) settle(ctx context.Context, d doubt) int {
	var status *string
	var body []byte
	var clock time.Time
	var writer *int64
	var row [10]*int64
	err := s.pool.QueryRow(ctx, s.qual.Replace(`SELECT CASE WHEN $1::bigint = 0 THEN NULL ELSE txid_status($1) END, (SELECT body FROM effectfence_records WHERE intent = $2), clock_timestamp(),
	(SELECT xmin::text::bigint FROM effectfence_counters WHERE shard = $3), r.* FROM (SELECT 1 WHERE `+readable+`) o
	LEFT JOIN (SELECT admitted, reclaimed, replayed, coalesced, stale, race, in_flight, prior_failure, conflict, lease_lost FROM effectfence_counters WHERE shard = $4) r ON true`),
		d.xid, d.intent, d.shard, d.stmtShard).Scan(&status, &body, &clock, &writer, &row[0], &row[1], &row[2], &row[3], &row[4], &row[5], &row[6], &row[7], &row[8], &row[9])
	if err != nil {
		return doubtUnasked
	}
	spec := d.body != nil
	if d.cut[0] != nil {
		// A claim: recorded if the record is that claim (its lease outlasts any wait here);
		// it may still be while the server's clock is not past until.
		if _, ok := cutToken(body, d.cut); ok || sameClaim(body, d.cut) {
			s.at("doubt landed", 0)
			return doubtSettled
		}
		if !clock.After(d.until) {
			return doubtUndecided
		}
	}
	switch {
	case d.xid != 0 && status == nil:
		// Too old for the server to tell: the counters may be in; never count them twice.
		return doubtUntold
	case d.xid != 0 && *status == "committed" && !receiptIs(writer, d.xid) && time.Since(d.at) < foldAge/2:
		// Its id names another transaction: the server lost this one (resolve). (Near
		// foldAge the receipt may have been folded away: then nothing tells, and the
		// counters are not added, lest they count twice.)
		s.at("doubt reused", 0)
		if spec && bytes.Equal(body, d.claim) {
			return doubtUndecided // the statement may still land
		}
		if spec && bytes.Equal(body, d.body) {
			s.at("doubt landed", 0)
			return doubtLanded
		}
	case d.xid != 0 && *status == "committed", spec && bytes.Equal(body, d.body):
		s.at("doubt landed", 0)
		return doubtLanded
	case d.xid != 0 && *status != "aborted", spec && bytes.Equal(body, d.claim):
		return doubtUndecided // the transaction or the statement may still commit
	}
	if d.stmtShard != "" && row[0] != nil && !rowHolds(row, d.stmtBase) {
		if rowHolds(row, d.stmtBase.Add(d.delta)) && time.Since(d.at) < foldAge/2 {
			// The statement added its counters to its connection's row: it landed, and its
			// record was changed since by another (an operator's clear, a takeover). Read
			// as never recorded, its counters were added a second time (before 2026-12-07:
			// TestClaimInDoubtClearedElsewhereCountsOnce).
			s.at("doubt landed", 0)
			return doubtLanded
		}
		// The row tells neither (folded away, say): the counters are not added, lest they
		// count twice.
		return doubtUntold
	}
	args, err := counterArgs(fmt.Sprintf("%s/settled/%d", s.instance, d.seq), d.delta)
	if err != nil {
		return doubtSettled // counters beyond a bigint: nothing can add them
	}
	if _, err := s.pool.Exec(ctx, s.qual.Replace(addCountersOnce), args...); err != nil {
		return doubtUnasked // tried again: the doubt's own shard takes them once
	}
	s.at("doubt added", 0)
	return doubtSettled
}

// lostStmt is a one-statement commit whose answer was lost with its connection: the record
// it writes, and its connection's counters row with what that row held before it (see
// doubt's stmtShard).
type lostStmt struct {
	intent string
	body   []byte
	shard  string
	base   fence.Counters
	delta  fence.Counters // the counters it carried
}

// rowHolds says whether row, a counters row as read (nil fields: no row), holds c. No row
// at all says a statement that would have written it did not land (an hour's fold, see
// foldCounters, may have removed the row before it, never after it within the hour).
func rowHolds(row [10]*int64, c fence.Counters) bool {
	want := []uint64{c.Admitted, c.Reclaimed, c.Replayed, c.Coalesced, c.Stale, c.Race, c.InFlight, c.PriorFailure, c.Conflict, c.LeaseLost}
	for i, v := range row {
		if (v == nil && want[i] != 0) || (v != nil && (*v < 0 || uint64(*v) != want[i])) {
			return false
		}
	}
	return true
}

// connCounted is what this store's committed writes on c added to c's counters row (see
// Store.shard): nothing else writes that row. A one-statement claim or commit whose answer is
// lost with c is known landed by that row (settle), whatever became of its record since.
func connCounted(c *pgconn.PgConn) *fence.Counters {
	m := c.CustomData()
	if v, ok := m["effectfence.counted"].(*fence.Counters); ok {
		return v
	}
	v := new(fence.Counters)
	m["effectfence.counted"] = v
	return v
}
