package fence

import (
	"context"
	"errors"
	"time"
)

// Store gives the engine atomicity and persistence; all gate logic lives in the engine.
//
// Update runs fn in one transaction that no other Update (in this process or any other
// process sharing the store) interleaves with, and makes its writes durable before returning
// nil. If fn returns an error, none of its writes take effect. View runs fn on a consistent
// snapshot; fn must not write. A store may run fn more than once (retry on serialisation
// failure), so fn must not have side effects outside the Tx. The memory store uses a mutex,
// SQLite an IMMEDIATE transaction, PostgreSQL row locks.
type Store interface {
	Update(ctx context.Context, fn func(Tx) error) error
	View(ctx context.Context, fn func(Tx) error) error
	Close() error
}

// Tx is the store's view inside one transaction.
type Tx interface {
	// Now is the store's clock: a shared store answers with database time so that leases
	// mean the same on every host.
	Now() time.Time

	// Get returns the record of an intent, or nil when there is none.
	Get(intent string) (*Record, error)
	// Put inserts or replaces a record.
	Put(rec *Record) error
	// Delete removes a record (no error if absent).
	Delete(intent string) error
	// Scan calls fn for every record matching f, in intent order, until fn returns false.
	Scan(f Filter, fn func(*Record) bool) error
	// CertByHash returns the done record whose cert has this hash, or nil; of several (a
	// superseded copy keeps its cert), the first in intent order.
	CertByHash(hash string) (*Record, error)

	// DomainSeq returns the current sequence number of a domain and whether the domain has a
	// row; an absent domain reads as the floor (see DomainFloor).
	DomainSeq(domain string) (seq uint64, found bool, err error)
	SetDomainSeq(domain string, seq uint64) error
	DeleteDomain(domain string) error
	// DomainFloor is the highest sequence number any evicted domain ever reached: new and
	// evicted domains start above it, so a sequence number is never reused for a domain.
	DomainFloor() (uint64, error)
	SetDomainFloor(seq uint64) error

	// NextToken returns a fencing token larger than every token it returned before.
	NextToken() (uint64, error)

	// AppendEvent adds an audit event; Events lists them for one intent ("" for all).
	AppendEvent(ev Event) error
	Events(intent string, fn func(Event) bool) error
	// DeleteEventsBefore drops audit events older than t except those KeptForever (operator
	// clears and refused late results).
	DeleteEventsBefore(t time.Time) (int, error)

	// AddCounters adds a delta to the ledger-wide counters; Counters reads them.
	AddCounters(delta Counters) error
	Counters() (Counters, error)
}

// CountersDeferred is implemented by a Tx that can tell when adding the counters would cost
// the transaction a write it does not otherwise make: the SQLite store's counters sit on the
// page of meta that a claim writes for its token and a commit does not touch, so a commit that
// carried them wrote one more WAL page before its fsync. When DeferCounters is true, the engine
// keeps its pending counters for a later transaction (a claim, or Flush, which always writes
// them).
type CountersDeferred interface {
	DeferCounters() bool
}

// CountersKept is implemented by a store's error after which the store itself answers for
// the counters the failed Update added (Tx.AddCounters): its commit may have landed, with
// them, though the answer was lost on the way back. The store learns later whether it did
// and adds them then only if it did not. The engine must not put such counters back among
// its pending ones, as it does after any other failure: sent again with a later write, they
// would be counted twice whenever the first commit had landed.
type CountersKept interface {
	CountersKept() bool
}

// countersKept says whether err says the store answers for the counters of the Update that
// failed with it.
func countersKept(err error) bool {
	var k CountersKept
	return errors.As(err, &k) && k.CountersKept()
}

// EarlierAttempt is implemented by a Tx whose store may have sent an outcome before and lost
// the answer with its connection (the PostgreSQL store: a one-statement commit followed up in
// a transaction, or a COMMIT it settles later), and can tell, once Get has read the intent,
// whether that report was recorded before another process changed the record (an
// operator's clear, say). A report
// refused lease_lost for the changed record is then not "unchanged": its first attempt landed.
type EarlierAttempt interface {
	// EarlierAttempt says of the outcome of the ticket (token, nonce) of intent, reported
	// before with its answer lost, whose record this transaction found changed since: landed,
	// that the earlier report was recorded before the change; maybe, that the ledger cannot
	// tell. Both false: no such report is known, or it was not recorded.
	EarlierAttempt(intent string, token uint64, nonce string) (landed, maybe bool)
}

// ExpiredSweeper may be implemented by a Tx that can drop expired outcomes without reading
// them: Sweep then asks it for each batch, instead of scanning the batch's records (decoding
// each, and on PostgreSQL reading each again under its lock, a round trip per record) and
// deleting them one by one.
type ExpiredSweeper interface {
	// SweepExpired deletes up to limit done records whose ExpiresAt is set and not after
	// before, the oldest first, and returns how many it deleted. A record is deleted only if
	// it is still such a record when it goes: one that another transaction has changed
	// meanwhile (re-claimed, committed again with a later expiry) stays. The deletion does
	// everything Delete of each record would. A store whose transactions run concurrently may
	// leave a record that another transaction is deciding on at that moment, for a later
	// sweep; more reports that expired records may remain beyond the ones this call looked at
	// (it found limit of them).
	SweepExpired(before time.Time, limit int) (n int, more bool, err error)
}

// Filter selects records in Scan. Zero fields select everything.
type Filter struct {
	States []State
	// ExpiresBefore selects records whose ExpiresAt is set and not after this time, whatever
	// their state (only done records carry one today; Sweep also asks for StateDone).
	ExpiresBefore time.Time
	// After resumes a scan after this intent (exclusive).
	After string
	// Limit, when positive, stops the scan after that many records: the first in intent order,
	// or with ByExpiry the first in expiry order.
	Limit int
	// ByExpiry orders the scan by ExpiresAt, the oldest first (records with the same instant in
	// any order), instead of by intent, and selects only records that have one. It needs a
	// Limit and no After. Sweep uses it for a Tx that is not an ExpiredSweeper (the memory
	// store's; both SQL stores sweep with SweepExpired), so each batch of a large expired
	// backlog costs its own size, where the first records in intent order had to be sorted out
	// of every expired record, batch after batch (40,000 expired records took 20 s to sweep).
	// The SQL stores answer it from their expiry index too.
	ByExpiry bool
	// Unreadable, when set, is told of each selected record whose stored bytes do not decode
	// (damaged, or edited by hand), and the scan goes on with the next; when nil such a record
	// ends the scan with its error. The operator's views and Recover set it, so that one
	// damaged record does not hide every other one; the record itself stays as it is, and every
	// Get of it still fails, so its intent is never run on the strength of a scan.
	Unreadable func(*UnreadableError)
}

// UnreadableError is a store's error for a record whose stored bytes do not decode, or that
// names another intent than the one it is filed under. Err is the store's own error, which
// says how to find and remove it.
type UnreadableError struct {
	Intent string
	Err    error
}

func (e *UnreadableError) Error() string { return e.Err.Error() }
func (e *UnreadableError) Unwrap() error { return e.Err }

// UnreadableEventError is a store's error for an audit event whose stored row does not decode
// (damaged, or edited by hand). ID is the row's id in the store's events table; Err is the
// store's own error, which says how to remove it.
type UnreadableEventError struct {
	Intent string
	ID     int64
	Err    error
}

func (e *UnreadableEventError) Error() string { return e.Err.Error() }
func (e *UnreadableEventError) Unwrap() error { return e.Err }

// EventsSkipping is implemented by a Tx whose stored events may fail to decode (the SQL
// stores'; the memory store's cannot). EventsSkipping is Events, but it tells unreadable of each
// event that does not decode and goes on with the next, where Events ends with its error. The
// operator's views (ledger show, export) use it, so that one damaged event does not hide
// every other one, as Filter.Unreadable does for records; the engine's own reads of the audit
// trail still fail on it.
type EventsSkipping interface {
	EventsSkipping(intent string, fn func(Event) bool, unreadable func(*UnreadableEventError)) error
}

// Filing is implemented by a Tx whose store files each record under its state and its cert's
// hash in columns of their own beside the record's stored bytes (the SQL stores, whose queries
// find records by them: the gates and ls by state, CertByHash by hash). Filing calls fn with
// the intent, state and cert hash ("" for none) of every record row, in no particular order,
// until fn returns false; fn must not use the transaction. A record edited by hand, its cert
// changed and hashed again, keeps the hash it was filed under: ledger verify compares them.
type Filing interface {
	Filing(fn func(intent string, state State, certHash string) bool) error
}

// OnlyUnreadable reports whether err is not nil and is made only of UnreadableErrors (alone
// or joined with errors.Join).
func OnlyUnreadable(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !OnlyUnreadable(e) {
				return false
			}
		}
		return true
	}
	_, ok := err.(*UnreadableError)
	return ok
}

// errByExpiry is what a store answers to a ByExpiry scan without a Limit or with After.
var errByExpiry = errors.New("fence: a ByExpiry scan needs a Limit and no After")

// CheckByExpiry returns an error if f asks for ByExpiry without a Limit or with After; stores
// call it before such a scan.
func (f Filter) CheckByExpiry() error {
	if f.ByExpiry && (f.Limit <= 0 || f.After != "") {
		return errByExpiry
	}
	return nil
}

// Match reports whether rec is selected by f (stores may use it or an equivalent query).
func (f Filter) Match(rec *Record) bool {
	if f.After != "" && rec.Intent <= f.After {
		return false
	}
	if len(f.States) > 0 {
		ok := false
		for _, s := range f.States {
			if rec.State == s {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if !f.ExpiresBefore.IsZero() && (rec.ExpiresAt.IsZero() || rec.ExpiresAt.After(f.ExpiresBefore)) {
		return false
	}
	return true
}

// errNoStore is what every call of an engine made without a store returns.
var errNoStore = errors.New("fence: the engine has no store (fence.New was given nil): give it fence.NewMemoryStore() or a durable store (store.Open)")

// noStore stands in for the store of an engine made without one: a clear error for every
// call, not a nil dereference.
type noStore struct{}

func (noStore) Update(context.Context, func(Tx) error) error { return errNoStore }
func (noStore) View(context.Context, func(Tx) error) error   { return errNoStore }
func (noStore) Close() error                                 { return errNoStore }
