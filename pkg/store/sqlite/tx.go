package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// The fixed queries, prepared once on each connection (see prepareOn).
const (
	qGet = "SELECT body FROM records WHERE intent = ?"
	// qGetUnchanged is qGet for a record whose large body the store has decoded before (?2):
	// 1 when the file holds those very bytes, the body when it holds another blob, 0 when it
	// holds no blob (only a file whose STRICT schema was edited can: the integer 1 must not
	// pass for a hit). SQLite compares the bytes where they are; a hit copies no body out of
	// SQLite and allocates none.
	qGetUnchanged = "SELECT CASE WHEN body = ?2 THEN 1 WHEN typeof(body) = 'blob' THEN body ELSE 0 END FROM records WHERE intent = ?1"
	qPut          = `INSERT INTO records(intent, state, expires_at, cert_hash, body) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(intent) DO UPDATE SET state = excluded.state, expires_at = excluded.expires_at,
		cert_hash = excluded.cert_hash, body = excluded.body`
	qDelete       = "DELETE FROM records WHERE intent = ?"
	qCertByHash   = "SELECT intent, body FROM records WHERE cert_hash = ? AND state = ? ORDER BY intent LIMIT 1"
	qMeta         = "SELECT value FROM meta WHERE key = ?"
	qDomainSeq    = "SELECT seq FROM domains WHERE domain = ?"
	qSetDomainSeq = "INSERT INTO domains(domain, seq) VALUES (?, ?) ON CONFLICT(domain) DO UPDATE SET seq = excluded.seq"
	qDeleteDomain = "DELETE FROM domains WHERE domain = ?"
	qSetFloor     = "UPDATE meta SET value = ? WHERE key = 'domain_floor'"
	qNextToken    = "UPDATE meta SET value = value + 1 WHERE key = 'token'"
	qAppendEvent  = "INSERT INTO events(at, intent, kind, who, reason, state, token) VALUES (?, ?, ?, ?, ?, ?, ?)"
	qEvents       = "SELECT id, at, intent, kind, who, reason, state, token FROM events WHERE id > ? ORDER BY id LIMIT ?"
	qEventsOf     = "SELECT id, at, intent, kind, who, reason, state, token FROM events WHERE intent = ? AND id > ? ORDER BY id LIMIT ?"
	qDeleteEvents = "DELETE FROM events WHERE at < ? AND kind NOT IN (?, ?, ?, ?, ?)" // see fence.KeptForeverKinds
	qAddCounter   = "INSERT INTO meta(key, value) VALUES ('counter.' || ?, ?) ON CONFLICT(key) DO UPDATE SET value = value + excluded.value"
	qCounters     = "SELECT substr(key, 9), value FROM meta WHERE key LIKE 'counter.%'"
)

// Savepoints of group commit (see runBatch).
const (
	qSavepoint  = "SAVEPOINT u"
	qRollbackTo = "ROLLBACK TO u"
	qRelease    = "RELEASE u"
)

// A read-only store over a ledger whose events table has no token column yet (no build that
// adds it has opened it for writing: see eventTokens) reads its events with these, every
// token 0; they are not prepared ahead.
const (
	qEventsNoToken   = "SELECT id, at, intent, kind, who, reason, state, 0 FROM events WHERE id > ? ORDER BY id LIMIT ?"
	qEventsOfNoToken = "SELECT id, at, intent, kind, who, reason, state, 0 FROM events WHERE intent = ? AND id > ? ORDER BY id LIMIT ?"
)

var preparedQueries = []string{qSavepoint, qRollbackTo, qRelease, qGet, qGetUnchanged, qPut, qDelete, qCertByHash, qMeta, qDomainSeq, qSetDomainSeq, qDeleteDomain, qSetFloor, qNextToken, qAppendEvent, qEvents, qEventsOf, qDeleteEvents, qAddCounter, qCounters}

// Transaction control of the writer's connection, prepared once with the other statements.
const (
	qBegin    = "BEGIN IMMEDIATE"
	qCommit   = "COMMIT"
	qRollback = "ROLLBACK"
	// qBeginRead begins a View's transaction: deferred, its snapshot is taken at its first read.
	qBeginRead = "BEGIN"
)

// txn is a fence.Tx over one SQLite transaction.
type txn struct {
	s     *Store
	r     runner
	now   time.Time
	write bool
	// meta is set once a statement of the transaction (of any caller in its batch) wrote a
	// row of meta: the page the counters live on is then in the transaction anyway
	// (DeferCounters). A savepoint rolled back may leave it set: the counters then cost a
	// page, as they did before.
	meta *bool
}

// DeferCounters (fence.CountersDeferred) says the engine's counters would add the page of meta
// to a transaction that does not write it otherwise: a commit, which they made write one page
// more (TestFreshDecisionWritesFewPages counts the transactions that write meta). They then
// ride in the next claim, which writes meta for its token.
func (t *txn) DeferCounters() bool { return t.meta == nil || !*t.meta }

// wroteMeta notes that the transaction wrote a row of meta.
func (t *txn) wroteMeta() {
	if t.meta != nil {
		*t.meta = true
	}
}

// runner runs a txn's statements (rawRunner: on a reader's or the writer's driver
// connection).
type runner interface {
	exec(q string, args ...any) (rowsAffected int64, err error)
	query(q string, args ...any) (rowIter, error)
}

// rowIter is the part of *sql.Rows a txn uses.
type rowIter interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

var errReadOnly = errors.New("sqlite ledger: write in a read-only transaction")

func (t *txn) Now() time.Time { return t.now }

func (t *txn) exec(q string, args ...any) error {
	if !t.write {
		return errReadOnly
	}
	_, err := t.r.exec(q, args...)
	return t.s.wrap(err)
}

// queryRow scans the first row of q into dest; sql.ErrNoRows when there is none.
func (t *txn) queryRow(q string, args []any, dest ...any) error {
	rows, err := t.r.query(q, args...)
	if err != nil {
		return err
	}
	if !rows.Next() {
		err := rows.Err()
		rows.Close()
		if err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	err = rows.Scan(dest...)
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}

// testHookDecoded, when set (by tests only), is told of every record body decode decodes.
var testHookDecoded func(intent string)

// decode reads a record body, reporting a damaged one as a fence.UnreadableError around a
// FileError.
func (t *txn) decode(intent string, body []byte) (*fence.Record, error) {
	if testHookDecoded != nil {
		testHookDecoded(intent)
	}
	var rec fence.Record
	problem := ""
	if isSplit(body) {
		whole, bad, err := t.join(intent, body)
		if err != nil {
			return nil, err
		}
		problem, body = bad, whole
	}
	if problem != "" {
		// told below, with the advice of any unreadable record
	} else if err := fence.DecodeRecord(body, &rec); err != nil { // rec keeps pieces of body, which is its own
		problem = fmt.Sprintf("holds an unreadable record for intent %q (%v)", intent, err)
	} else if rec.Intent != intent {
		problem = fmt.Sprintf("holds a record filed under intent %q that names intent %q", intent, rec.Intent)
	}
	if problem == "" {
		return &rec, nil
	}
	// Only this record is lost, not the ledger: moving the file aside would drop every other
	// receipt. The row goes once its effect's fate is known, as the PostgreSQL store says too.
	advice := fmt.Sprintf("no call of that intent runs while it is so, and nothing was changed; its effect may have happened: check in the real system, then remove the record (%s) and the next attempt of that intent runs; `effectfence ledger check --ledger %s` lists every such record",
		removeCommand(t.s.path, intent), shellArg(t.s.path))
	return nil, &fence.UnreadableError{Intent: intent, Err: &FileError{Path: t.s.path, Problem: problem, Advice: advice}}
}

// join reads the pieces of intent's split body (split.go) and gives back the record's whole
// encoding; problem says what is wrong when the pieces are missing or are not the ones the
// body names (the record is then unreadable, like a damaged body).
func (t *txn) join(intent string, body []byte) (whole []byte, problem string, err error) {
	var pieces []byte
	switch err := t.queryRow(qPieces, []any{intent}, &pieces); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Sprintf("holds a record for intent %q whose arguments (table record_args) are missing", intent), nil
	case err != nil:
		return nil, "", t.s.wrap(err)
	}
	if !checkPieces(body, pieces) {
		return nil, fmt.Sprintf("holds a record for intent %q whose arguments (table record_args) are not the ones it was stored with", intent), nil
	}
	whole, jerr := joinBody(body, pieces)
	if jerr != nil {
		return nil, fmt.Sprintf("holds an unreadable record for intent %q (%v)", intent, jerr), nil
	}
	return whole, "", nil
}

// removeCommand is the sqlite3 shell command that removes intent's record from the ledger
// at path, quoted for a POSIX shell: an intent is what an agent wrote, and a pasted command
// must run nothing it holds.
func removeCommand(path, intent string) string {
	return "sqlite3 " + shellArg(path) + " " + shellArg("DELETE FROM records WHERE intent = '"+strings.ReplaceAll(intent, "'", "''")+"'")
}

// removeEventCommand is the sqlite3 command that removes audit event id from the ledger at path.
func removeEventCommand(path string, id int64) string {
	return "sqlite3 " + shellArg(path) + " " + shellArg(fmt.Sprintf("DELETE FROM events WHERE id = %d", id))
}

// shellArg quotes s as one word for a POSIX shell: in double quotes when nothing in it is
// special there (the common case, easier to read), else in single quotes.
func shellArg(s string) string {
	if s != "" && !strings.ContainsAny(s, " '\"$`\\!*?[]{}()<>|&;#~\t\n") {
		return s
	}
	if !strings.ContainsAny(s, "\"$`\\!") {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// decodeCached is decode through the store's cache of decoded records (decoded.go); h is
// intent's hash in it.
func (t *txn) decodeCached(h uint64, intent string, body []byte) (*fence.Record, error) {
	if rec := t.s.decoded.get(h, intent, body); rec != nil {
		return rec, nil
	}
	rec, err := t.decode(intent, body)
	if err == nil {
		// body is the driver's fresh slice, which nothing changes, and rec holds pieces of
		// it already: the cache keeps it as it is.
		t.s.decoded.putSized(h, intent, body, rec, wholeSize(body))
	}
	return rec, err
}

func (t *txn) Get(intent string) (*fence.Record, error) {
	h := t.s.decoded.hash(intent)
	if e := t.s.decoded.bigEntry(h, intent); e != nil {
		if rec, ok, err := t.getUnchanged(h, e); ok {
			return rec, err
		}
	}
	var body []byte
	err := t.queryRow(qGet, []any{intent}, &body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, t.s.wrap(err)
	}
	return t.decodeCached(h, intent, body)
}

// getUnchanged is Get for an intent whose large record the cache holds as e: e's record when
// the file holds e's bytes, else the record the file holds. ok is false when the file holds
// something other than a blob: Get then reads it as it reads any record.
func (t *txn) getUnchanged(h uint64, e *decodedEntry) (rec *fence.Record, ok bool, err error) {
	var v any
	err = t.queryRow(qGetUnchanged, []any{e.intent, e.body}, &v)
	if errors.Is(err, sql.ErrNoRows) {
		t.s.decoded.dropBig(h, e) // the record went
		return nil, true, nil
	}
	if err != nil {
		return nil, true, t.s.wrap(err)
	}
	if v, isInt := v.(int64); isInt && v == 1 {
		return e.rec, true, nil
	}
	// The record changed: e will not answer again and would only cost every later Get a
	// comparison.
	t.s.decoded.dropBig(h, e)
	if body, isBlob := v.([]byte); isBlob {
		rec, err := t.decodeCached(h, e.intent, body)
		return rec, true, err
	}
	return nil, false, nil
}

func nanos(at time.Time) any {
	if at.IsZero() {
		return nil
	}
	return unixNano(at)
}

// Instants the ledger's integer columns can hold: nanoseconds since 1970 in an int64.
var (
	latestNano   = time.Unix(0, math.MaxInt64)
	earliestNano = time.Unix(0, math.MinInt64)
)

// unixNano is at.UnixNano() held to the int64 range: beyond it (after 2262, as an expiry 300
// years ahead is: Config.ResultTTL may be that long) UnixNano wraps, and a done outcome read as
// long expired was swept at once, so that its duplicate ran again.
func unixNano(at time.Time) int64 {
	switch {
	case at.After(latestNano):
		return math.MaxInt64
	case at.Before(earliestNano):
		return math.MinInt64
	}
	return at.UnixNano()
}

func (t *txn) Put(rec *fence.Record) error {
	if !t.write {
		return errReadOnly
	}
	body, decoded, err := fence.EncodeRecordDecoded(rec, decodedBigMax)
	if err != nil {
		return fmt.Errorf("sqlite ledger: encoding the record of %q: %w", rec.Intent, err)
	}
	var hash any
	if rec.Cert != nil {
		hash = rec.Cert.Hash
	}
	size := len(body)
	if stub, pieces, ok := splitBody(rec, body); ok {
		// The arguments go to record_args (split.go); when they are there already, as at the
		// commit of a claim, qPutArgs writes nothing.
		var id int64
		if err := t.queryRow(qPutSplit, []any{rec.Intent, string(rec.State), nanos(rec.ExpiresAt), hash, stub}, &id); err != nil {
			return t.s.wrap(err)
		}
		if err := t.exec(qPutArgs, id, pieces); err != nil {
			return err
		}
		body = stub
	} else if err := t.exec(qPut, rec.Intent, string(rec.State), nanos(rec.ExpiresAt), hash, body); err != nil {
		return err
	}
	if decoded != nil {
		// The commit of a fresh call reads this claim back: it finds these bytes and is
		// answered without decoding them. Should this transaction roll back, the file holds
		// other bytes and the entry simply misses (decodedCache answers only for equal bytes;
		// a split body names its pieces by their digest).
		t.s.decoded.putSized(t.s.decoded.hash(rec.Intent), rec.Intent, body, decoded, size)
	}
	return nil
}

func (t *txn) Delete(intent string) error {
	return t.exec(qDelete, intent)
}

// sweepBatch is the most records SweepExpired deletes in one transaction: 100 outcomes with
// 64 KB results take 28-30 ms to sweep on the thirtieth session's VM, 100 of 1 KB 1.3-1.5 ms
// (the batch was 1000: 1000 of 64 KB took 28-29 ms, and 285-295 ms once freed pages were
// zeroed).
const sweepBatch = 100

// qSweepExpired deletes the oldest expired done records, up to a number, in one statement:
// the subquery reads their intents from records_life in its order (see SweepExpired).
const qSweepExpired = `DELETE FROM records WHERE intent IN (SELECT intent FROM records
	WHERE state = 'done' AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at LIMIT ?)`

// SweepExpired (fence.ExpiredSweeper) deletes up to limit expired done records in one
// statement, reading none of them. Scan and Delete decoded every record of the batch to
// learn its intent, then ran a statement per record. Update holds the only write
// transaction, so no other transaction can change the records between the subquery and the
// deletion; Delete does nothing else, and the cache of decoded records answers only for the
// bytes it holds, so its entries of swept records merely miss.
//
// A batch is at most sweepBatch records: secure_delete (dsn) writes every page a deletion
// frees, so a batch of large outcomes writes as much as they took, under the write lock that
// fresh calls wait for.
func (t *txn) SweepExpired(before time.Time, limit int) (int, bool, error) {
	if !t.write {
		return 0, false, errReadOnly
	}
	limit = min(limit, sweepBatch)
	n, err := t.r.exec(qSweepExpired, unixNano(before), limit)
	if err != nil {
		return 0, false, t.s.wrap(err)
	}
	return int(n), int(n) == limit, nil
}

// scanQuery is Scan's query for f; its last two parameters, left for the caller, are the
// intent to resume after and the page size (for f.ByExpiry, only the number of records: its
// order comes from records_life, and the scan reads them in one page).
func scanQuery(f fence.Filter) (string, []any) {
	if q, args, ok := openStatesQuery(f); ok {
		return q, args
	}
	var where []string
	var args []any
	if len(f.States) > 0 {
		// In intent order, +state keeps SQLite off records_life (recordIndexes): for done
		// records it would read them all from it and sort them, on every page, where the
		// intent's own index reads them in order. By expiry, records_life is the order, and
		// for expired records it finds the few there are.
		col := "+state"
		if f.ByExpiry || !f.ExpiresBefore.IsZero() {
			col = "state"
		}
		where = append(where, col+" IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if !f.ExpiresBefore.IsZero() {
		where = append(where, "expires_at IS NOT NULL AND expires_at <= ?")
		args = append(args, unixNano(f.ExpiresBefore))
	}
	if f.ByExpiry {
		if f.ExpiresBefore.IsZero() {
			where = append(where, "expires_at IS NOT NULL")
		}
		return "SELECT intent, body FROM records WHERE " + strings.Join(where, " AND ") + " ORDER BY expires_at LIMIT ?", args
	}
	where = append(where, "intent > ?")
	return "SELECT intent, body FROM records WHERE " + strings.Join(where, " AND ") + " ORDER BY intent LIMIT ?", args
}

// openStatesQuery is scanQuery's query for a page of records of states that are not done
// (Recover's in_flight, `ledger ls --state fenced`: in_flight and unknown), in intent order:
// for each state, its records without an expiry read in order from records_life (state,
// expires_at, intent) and the few with one sorted, merged (SQLite's MERGE of a compound
// SELECT) up to the page's size. One query over the state alone would read every record of
// it after the page's first intent and sort them, on every page. ok is false for any other
// filter.
func openStatesQuery(f fence.Filter) (q string, args []any, ok bool) {
	if f.ByExpiry || len(f.States) == 0 {
		return "", nil, false
	}
	var states []string
	for _, st := range f.States {
		if st == fence.StateDone {
			return "", nil, false
		}
		if !slices.Contains(states, string(st)) {
			states = append(states, string(st))
		}
	}
	// Numbered parameters: every branch reads the same bound and resume point. The caller
	// appends the intent to resume after and the page size.
	for _, st := range states {
		args = append(args, st)
	}
	runs := []string{"expires_at IS NULL", "expires_at IS NOT NULL"}
	if !f.ExpiresBefore.IsZero() {
		args = append(args, unixNano(f.ExpiresBefore))
		runs = []string{fmt.Sprintf("expires_at IS NOT NULL AND expires_at <= ?%d", len(args))}
	}
	after, limit := len(args)+1, len(args)+2
	var branches []string
	for i := range states {
		for _, run := range runs {
			branches = append(branches, fmt.Sprintf("SELECT intent, body FROM records WHERE state = ?%d AND %s AND intent > ?%d", i+1, run, after))
		}
	}
	return strings.Join(branches, " UNION ALL ") + fmt.Sprintf(" ORDER BY intent LIMIT ?%d", limit), args, true
}

// scanPage is how many records Scan reads before calling fn on them: rows are closed before
// fn runs, so fn may use the transaction, and memory stays bounded for any ledger size.
const scanPage = 256

// scanPageBytes also ends a page (but for a ByExpiry scan, one page of at most its Limit), once
// the bodies read reach it: a record holds its result whole, and a page of 256 large ones
// was held at once (`ledger export` of 8 records of 5 MB results peaked at 830 MB; 256 of
// them would need 25 GB). A page holds at least one record, whatever its size.
const scanPageBytes = 8 << 20

func (t *txn) Scan(f fence.Filter, fn func(*fence.Record) bool) error {
	if err := f.CheckByExpiry(); err != nil {
		return err
	}
	q, args := scanQuery(f)
	after, seen := f.After, 0
	for {
		page := scanPage
		if f.ByExpiry {
			page = f.Limit // one page: at most Limit records held at once
		}
		if f.Limit > 0 && f.Limit-seen < page {
			page = f.Limit - seen
		}
		if page <= 0 {
			return nil
		}
		params := args
		if !f.ByExpiry {
			params = append(params, after)
		}
		rows, err := t.r.query(q, append(params, page)...)
		if err != nil {
			return t.s.wrap(err)
		}
		type row struct {
			intent string
			body   []byte
		}
		var got []row
		full, size := false, 0 // full: the page ended at scanPageBytes, not at its last row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.intent, &r.body); err != nil {
				rows.Close()
				return t.s.wrap(err)
			}
			got = append(got, r)
			if size += len(r.body); size >= scanPageBytes && !f.ByExpiry && len(got) < page {
				full = true
				break
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return t.s.wrap(err)
		}
		// Decoded once the rows are closed: a split body's pieces are read by a query of
		// their own (split.go).
		recs := make([]scanned, 0, len(got))
		for _, r := range got {
			rec, err := t.decode(r.intent, r.body)
			var u *fence.UnreadableError
			if errors.As(err, &u) && f.Unreadable != nil {
				rec = &fence.Record{Intent: r.intent} // told to f.Unreadable below, in its place
			} else if err != nil {
				return err
			}
			recs = append(recs, scanned{rec, u})
		}
		for _, r := range recs {
			if r.bad != nil {
				f.Unreadable(r.bad)
			} else if !fn(r.rec) {
				return nil
			}
		}
		seen += len(recs)
		if len(recs) < page && !full {
			return nil
		}
		after = recs[len(recs)-1].rec.Intent
	}
}

// scanned is one row Scan read: its record, or what made it unreadable.
type scanned struct {
	rec *fence.Record
	bad *fence.UnreadableError
}

// CertByHash scans the records table: no index maps cert hashes (recordIndexes: it cost a page
// on every commit for a lookup no hot path makes; `ledger verify` resolves parents from its own
// scan).
func (t *txn) CertByHash(hash string) (*fence.Record, error) {
	var intent string
	var body []byte
	err := t.queryRow(qCertByHash, []any{hash, string(fence.StateDone)}, &intent, &body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, t.s.wrap(err)
	}
	return t.decodeCached(t.s.decoded.hash(intent), intent, body)
}

// seqs are uint64 in the engine and INTEGER (int64) in SQLite; no ledger reaches 2^63.
func toDB(n uint64) (int64, error) {
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("sqlite ledger: sequence number %d does not fit the ledger", n)
	}
	return int64(n), nil
}

func (t *txn) metaInt(key string) (uint64, error) {
	var v int64
	err := t.queryRow(qMeta, []any{key}, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, &FileError{Path: t.s.path, Problem: fmt.Sprintf("lacks its %q row", key)}
	}
	if err != nil {
		return 0, t.s.wrap(err)
	}
	return uint64(v), nil
}

func (t *txn) DomainSeq(domain string) (uint64, bool, error) {
	var v int64
	err := t.queryRow(qDomainSeq, []any{domain}, &v)
	if errors.Is(err, sql.ErrNoRows) {
		floor, err := t.DomainFloor()
		return floor, false, err
	}
	if err != nil {
		return 0, false, t.s.wrap(err)
	}
	return uint64(v), true, nil
}

func (t *txn) SetDomainSeq(domain string, seq uint64) error {
	v, err := toDB(seq)
	if err != nil {
		return err
	}
	return t.exec(qSetDomainSeq, domain, v)
}

func (t *txn) DeleteDomain(domain string) error {
	return t.exec(qDeleteDomain, domain)
}

func (t *txn) DomainFloor() (uint64, error) { return t.metaInt("domain_floor") }

func (t *txn) SetDomainFloor(seq uint64) error {
	v, err := toDB(seq)
	if err != nil {
		return err
	}
	t.wroteMeta()
	return t.exec(qSetFloor, v)
}

// NextToken increments the token row. The row is written in the transaction, so it is as
// durable as the claim that carries the token; a rolled-back claim's token is handed out again,
// which is safe because nobody ever held it. The new value is read back with a second
// statement in the same transaction: UPDATE … RETURNING cost more (about 9,000 more
// instructions per claim, BenchmarkAdmitCommit under callgrind).
func (t *txn) NextToken() (uint64, error) {
	if !t.write {
		return 0, errReadOnly
	}
	t.wroteMeta()
	n, err := t.r.exec(qNextToken)
	if err != nil {
		return 0, t.s.wrap(err)
	}
	if n == 0 {
		return 0, &FileError{Path: t.s.path, Problem: `lacks its "token" row`}
	}
	return t.metaInt("token")
}

func (t *txn) AppendEvent(ev fence.Event) error {
	if ev.Token > math.MaxInt64 {
		return fmt.Errorf("sqlite ledger: event token %d does not fit the token column", ev.Token)
	}
	return t.exec(qAppendEvent,
		ev.At.UnixNano(), ev.Intent, ev.Kind, ev.Who, ev.Reason, string(ev.State), int64(ev.Token))
}

func (t *txn) Events(intent string, fn func(fence.Event) bool) error {
	return t.EventsSkipping(intent, fn, nil)
}

// EventsSkipping is Events telling unreadable of each event that does not decode (a token
// below zero, which the column takes when the file is edited by hand), and going on with the
// next (fence.EventsSkipping); with unreadable nil such an event ends it with its error.
func (t *txn) EventsSkipping(intent string, fn func(fence.Event) bool, unreadable func(*fence.UnreadableEventError)) error {
	q, qOf := qEvents, qEventsOf
	if t.s.noEventTokens {
		q, qOf = qEventsNoToken, qEventsOfNoToken
	}
	args := []any{}
	if intent != "" {
		q = qOf
		args = append(args, intent)
	}
	var last int64
	for {
		rows, err := t.r.query(q, append(args, last, scanPage)...)
		if err != nil {
			return t.s.wrap(err)
		}
		var evs []fence.Event
		n := 0 // rows read, the unreadable ones too
		for rows.Next() {
			n++
			var ev fence.Event
			var at, token int64
			var state string
			if err := rows.Scan(&last, &at, &ev.Intent, &ev.Kind, &ev.Who, &ev.Reason, &state, &token); err != nil {
				rows.Close()
				return t.s.wrap(err)
			}
			if token < 0 {
				fe := &FileError{Path: t.s.path, Problem: fmt.Sprintf("has an event of intent %q with token %d, below zero", ev.Intent, token)}
				if unreadable == nil {
					rows.Close()
					return fe
				}
				unreadable(&fence.UnreadableEventError{Intent: ev.Intent, ID: last, Err: fmt.Errorf("sqlite ledger %s: audit event %d of intent %q has token %d, below zero: the file was changed outside effectfence; to remove it: DELETE FROM events WHERE id = %d",
					t.s.path, last, ev.Intent, token, last)})
				continue
			}
			ev.At, ev.State, ev.Token = time.Unix(0, at), fence.State(state), uint64(token)
			evs = append(evs, ev)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return t.s.wrap(err)
		}
		for _, ev := range evs {
			if !fn(ev) {
				return nil
			}
		}
		if n < scanPage {
			return nil
		}
	}
}

func (t *txn) DeleteEventsBefore(before time.Time) (int, error) {
	if !t.write {
		return 0, errReadOnly
	}
	args := []any{unixNano(before)}
	for _, k := range fence.KeptForeverKinds() {
		args = append(args, k)
	}
	n, err := t.r.exec(qDeleteEvents, args...)
	if err != nil {
		return 0, t.s.wrap(err)
	}
	return int(n), nil
}

// counterField is one of the ledger's counters: its name (the JSON name in fence.Counters)
// and its field.
type counterField struct {
	name string
	p    *uint64
}

// counterFields lists c's counters (an array, not a map: AddCounters runs in every decision).
func counterFields(c *fence.Counters) [10]counterField {
	return [10]counterField{
		{"admitted", &c.Admitted}, {"reclaimed", &c.Reclaimed}, {"replayed", &c.Replayed},
		{"coalesced", &c.Coalesced}, {"refused_stale_read_set", &c.Stale}, {"refused_domain_race", &c.Race},
		{"refused_in_flight", &c.InFlight}, {"refused_prior_failure", &c.PriorFailure},
		{"refused_conflict", &c.Conflict}, {"lease_lost", &c.LeaseLost},
	}
}

func (t *txn) AddCounters(d fence.Counters) error {
	if !t.write {
		return errReadOnly
	}
	for _, f := range counterFields(&d) {
		if *f.p == 0 {
			continue
		}
		v, err := toDB(*f.p)
		if err != nil {
			return err
		}
		t.wroteMeta()
		if err := t.exec(qAddCounter, f.name, v); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) Counters() (fence.Counters, error) {
	var c fence.Counters
	fields := counterFields(&c)
	rows, err := t.r.query(qCounters)
	if err != nil {
		return c, t.s.wrap(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return c, t.s.wrap(err)
		}
		for _, f := range fields {
			if f.name == name {
				*f.p = uint64(v)
			}
		}
	}
	return c, t.s.wrap(rows.Err())
}

// Filing reads the state and cert hash every record is filed under (fence.Filing).
func (t *txn) Filing(fn func(intent string, state fence.State, certHash string) bool) error {
	rows, err := t.r.query("SELECT intent, state, cert_hash FROM records")
	if err != nil {
		return t.s.wrap(err)
	}
	defer rows.Close()
	for rows.Next() {
		var intent, state string
		var hash any // NULL for a record without a cert
		if err := rows.Scan(&intent, &state, &hash); err != nil {
			return t.s.wrap(err)
		}
		h := ""
		switch v := hash.(type) {
		case string:
			h = v
		case []byte:
			h = string(v)
		}
		if !fn(intent, fence.State(state), h) {
			return nil
		}
	}
	return t.s.wrap(rows.Err())
}
