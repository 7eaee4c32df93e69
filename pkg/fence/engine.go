package fence

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/effectfence/effectfence/pkg/canon"
)

// MaxIntentLen bounds the length of an intent id in bytes.
const MaxIntentLen = 1024

// MaxDomainLen bounds the length of a domain name in bytes (the request's domain and each
// read-set entry's). A domain is a key of the ledger as an intent is; PostgreSQL refuses an
// index key of more than 2704 bytes, so without a bound a long domain that the memory and
// SQLite stores accept would be a ledger error there.
const MaxDomainLen = 1024

// Engine is the fence. It is safe for concurrent use; several Engines (in one process or many)
// may share one Store, and the Store's transactions make them agree. Make one with New: an
// Engine's zero value has no store, no caches and no configuration, and is not usable.
type Engine struct {
	store  Store
	cfg    Config
	counts counter
	watch  watchers
	fps    *fpCache
	ticks  *firstTicks
	known  knownIntents // for WriteFirst stores: intents this engine saw recorded
	wf     bool         // the store is a WriteFirst store (asked once, in New)
	spool  spool
	mem    *MemoryStore // store, when it is the memory store (Prepare's stack pass)
	// memWall: store is a memory store on the wall clock, so a read-only pass's clock is this
	// process's own time.Now, read when asked. The gates then tell whether a recorded instant
	// has come with time.Until: an instant this process recorded carries a monotonic reading,
	// and time.Now would have been compared by it alone, so only the monotonic clock need be
	// read (time.Now reads both clocks: on a VM, a quarter of a replay). Known from the
	// engine, not asked of the transaction (an interface assertion on every pass).
	memWall bool
	lost    lostClaims // claims whose Prepare failed after writing them (orphan.go)
	// abandoned are the claims PrepareWaitBeside gave up before they landed (beside.go).
	abandoned abandonedClaims
	// carried is the last owner string made with a carrier (ownerWith): the carrier and the
	// owner, so the claims sent to one server process share one string.
	carried atomic.Pointer[[2]string]
	// ledgerHigh is, per bucket, the highest ledger total Stats answered (see Stats).
	ledgerHigh [nBuckets]atomic.Uint64
}

// New returns an engine over store. An engine given no store (nil) refuses every call with
// an error saying so.
func New(store Store, cfg Config) *Engine {
	if store == nil {
		store = noStore{}
	}
	wf, ok := store.(WriteFirst)
	mem, _ := store.(*MemoryStore)
	e := &Engine{store: store, cfg: cfg.withDefaults(), fps: newFPCache(), ticks: newFirstTicks(), wf: ok && wf.WriteFirst(), mem: mem, memWall: mem != nil && mem.wall}
	e.lost.stop = make(chan struct{})
	e.lost.ctx, e.lost.cancel = context.WithCancel(context.Background())
	return e
}

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Store returns the engine's store.
func (e *Engine) Store() Store { return e.store }

// call is what validate derives from a request: its canonical arguments and fingerprint. The
// request itself travels beside it as a pointer, never inside a struct with other pointers:
// the compiler's escape analysis does not tell one field from another, so a pointer to the
// caller's request stored in a pass whose other fields reach the heap would move every
// request to the heap; and copying it (232 bytes), with room for it zeroed in a pass on the
// stack, was a tenth of a replay's own work.
type call struct {
	args   []byte
	fp     string
	stored []byte // what the ledger keeps of args (privacy.go)
	// note, for PrepareWaitBeside, collects the nonces of the claims written (beside.go).
	note *claimNote
}

// validate checks req and fills c with its canonical arguments and its fingerprint.
func (e *Engine) validate(req *Request, c *call) error {
	if why, _ := intentFault(req.Intent); why != "" {
		return InvalidError{"intent", why}
	}
	if !validCarrier(req.Carrier) {
		return InvalidError{"carrier", "must be empty or made by GroupCarrier"}
	}
	if err := checkPrivacy(req); err != nil {
		return err
	}
	for i, r := range req.ReadSet {
		if r.Domain == "" {
			return InvalidError{fmt.Sprintf("read_set[%d].domain", i), "must not be empty"}
		}
		if why := badDomain(r.Domain); why != "" {
			return InvalidError{fmt.Sprintf("read_set[%d].domain", i), why}
		}
	}
	// Text a store writes as JSON or into a text column must be UTF-8: JSON would record
	// each invalid byte as U+FFFD (two domains or agents that differ only there would read
	// back alike) and PostgreSQL refuses it with a ledger error.
	// Field by field, not a loop over an array of them (which was built on every call).
	if !validUTF8(req.Agent) {
		return InvalidError{"agent", "must be valid UTF-8"}
	}
	if req.Domain != "" {
		if why := badDomain(req.Domain); why != "" {
			return InvalidError{"domain", why}
		}
	}
	if req.Parent != "" && !isCertHash(req.Parent) {
		// Certified as given, anything else made every `ledger verify` of the ledger fail.
		return InvalidError{"parent", "must be empty or the hash of the cert this action follows (64 lowercase hex digits)"}
	}
	if len(req.Clock) > 0 { // ranging over an empty map still sets up an iterator
		for k, n := range req.Clock {
			if !validUTF8(k) {
				return InvalidError{"vector_clock", "agent names must be valid UTF-8"}
			}
			// Admission ticks the deciding agent's counter: at its maximum it would wrap to
			// zero, and the cert's clock would go back before everything the agent knew.
			if n == math.MaxUint64 && k == req.Agent {
				return InvalidError{"vector_clock", fmt.Sprintf("the counter of agent %q is at its maximum and cannot be ticked", k)}
			}
		}
	}
	args := req.Args
	if len(args) == 0 {
		args = []byte("null")
	}
	slot, canonical, fp, ok := e.fps.get(req.Tool, args)
	if ok {
		// The cache holds only tools that passed the check below.
		c.set(canonical, fp, req.Redact)
		return nil
	}
	if !validUTF8(req.Tool) {
		return InvalidError{"tool", "must be valid UTF-8"}
	}
	canonical, err := canon.JSON(args)
	if err != nil {
		return InvalidError{"args", err.Error()}
	}
	if !nestedWithin(canonical, MaxNesting) {
		return InvalidError{"args", fmt.Sprintf("nested deeper than %d levels", MaxNesting)}
	}
	fp = canon.Sum(canon.ToolCallCanonical(req.Tool, canonical))
	e.fps.put(slot, req.Tool, args, canonical, fp)
	c.set(canonical, fp, req.Redact)
	return nil
}

// otherEmptyArgs returns, for canonical arguments null or {}, the other of the two (the form
// Request.EmptyArgsAlike also matches); nil for any other arguments.
func otherEmptyArgs(canonical []byte) []byte {
	switch string(canonical) {
	case "null":
		return []byte("{}")
	case "{}":
		return []byte("null")
	}
	return nil
}

// badDomain says what is wrong with a non-empty domain name, or "": it must be at most
// MaxDomainLen bytes of valid UTF-8 without a NUL (PostgreSQL text cannot hold one).
func badDomain(d string) string {
	switch {
	case len(d) > MaxDomainLen:
		return fmt.Sprintf("is %d bytes; at most %d", len(d), MaxDomainLen)
	case !validUTF8(d):
		return "must be valid UTF-8"
	case strings.IndexByte(d, 0) >= 0:
		return "must not contain a NUL byte"
	}
	return ""
}

// isCertHash reports whether s has the form of a cert's hash: 64 lowercase hex digits.
func isCertHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ledgerText is free text a caller gives the ledger (a reason, who did it, a late result
// quoted in an audit reason) as every store keeps it: each byte that is not part of valid
// UTF-8 becomes U+FFFD, one for each byte, as the SQLite and PostgreSQL stores' JSON encoding
// writes it. Done here, so that the memory store (which keeps strings as given) answers alike.
func ledgerText(s string) string {
	if validUTF8(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s { // an invalid byte ranges as one utf8.RuneError
		b.WriteRune(r)
	}
	return b.String()
}

// validUTF8 is utf8.ValidString with a fast path for the ASCII ids most intents are (the
// library's setup costs more than the loop on short strings). It is small enough to be
// inlined, so the empty fields most requests have (parent, domain) cost no call.
func validUTF8(s string) bool {
	return len(s) == 0 || validText(s)
}

// validText is validUTF8 of a non-empty string: eight bytes at a time, the tail as one more
// word ending at the last byte (it overlaps bytes already found ASCII), and a string of four
// to seven bytes as two overlapping four-byte words. A high bit anywhere hands the string,
// from the first word that may hold it, to the library.
func validText(s string) bool {
	const hi8, hi4 = 0x8080808080808080, 0x80808080
	n := len(s)
	switch {
	case n >= 8:
		i := 0
		for ; n-i >= 8; i += 8 {
			if le64(s[i:i+8])&hi8 != 0 {
				return utf8.ValidString(s[i:])
			}
		}
		if i < n && le64(s[n-8:])&hi8 != 0 {
			return utf8.ValidString(s[i:]) // every byte before i is ASCII
		}
		return true
	case n >= 4:
		if (le32(s[:4])|le32(s[n-4:]))&hi4 != 0 {
			return utf8.ValidString(s)
		}
		return true
	}
	for i := 0; i < n; i++ {
		if s[i] >= utf8.RuneSelf {
			return utf8.ValidString(s[i:])
		}
	}
	return true
}

func le64(b string) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func le32(b string) uint32 {
	_ = b[3]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// outcome of one pass through the gates.
type outcome int

const (
	outAdmitted outcome = iota
	outReclaimed
	outReplayed
	outRefused
	outNeedWrite // a read-only pass found that the decision needs a write transaction
)

// snapshot holds the read-set domains' sequence numbers as the attempt arrived.
type snapshot map[string]uint64

// gate runs the three gates of SPEC §3 for req, whose call is p.c, on one transaction; an
// admission or a replay leaves its answer in p.adm. With write false it decides whatever it can
// without writing (replays, refusals, stale read sets) and returns outNeedWrite otherwise; with
// write true it claims. snap is filled on the read-only pass and used on the write pass to tell
// a stale read (moved before the attempt arrived) from a domain race (moved in the instant
// between arrival and reservation).
func (p *pass) gate(tx Tx, req *Request) (outcome, error) {
	e, c, write, snap := p.e, &p.c, p.write, p.snap
	if len(req.ReadSet) > 0 || (write && req.Domain != "") {
		if pf, ok := tx.(DomainPrefetcher); ok {
			// The domains this pass reads travel with the record's read.
			for _, r := range req.ReadSet {
				pf.PrefetchDomain(r.Domain)
			}
			if write && req.Domain != "" {
				pf.PrefetchDomain(req.Domain)
			}
		}
	}
	rec, err := tx.Get(req.Intent)
	if err != nil {
		return 0, err
	}
	// The clock is read after Get (a store that locks the intent reads its clock once it
	// holds the lock), and only if a decision needs it: a first attempt's read-only pass
	// does not.
	clock := passClock{tx: tx, process: !write && e.memWall}
	var (
		reclaimed  *Record // the claim this attempt takes over, if any
		reclaimWhy string
		superseded *Record // the done record past its replay window that this attempt moves aside
	)
	if rec != nil {
		if rec.State == StateDone && !rec.ExpiresAt.IsZero() && clock.reached(rec.ExpiresAt) {
			rec = nil // an expired outcome is forgotten: the intent is free
		}
	}
	form := c // the call as the claim records it
	if rec != nil {
		if a, ok := e.metAbandoned(rec); ok {
			// A claim of this process given up before it landed, its call never sent: it is
			// released, and the intent asked again (pooledPass.prepare).
			return outRefused, a
		}
		if rec.Fingerprint != c.fp {
			other := otherEmptyArgs(c.args)
			if !req.EmptyArgsAlike || other == nil || canon.Sum(canon.ToolCallCanonical(req.Tool, other)) != rec.Fingerprint {
				return outRefused, IntentConflictError{Intent: req.Intent, Recorded: rec.Fingerprint, Presented: c.fp}
			}
			form = &call{args: other, fp: rec.Fingerprint, stored: other}
		}
		switch rec.State {
		case StateDone:
			if rec.Cert == nil {
				return 0, doneWithoutCert(req.Intent)
			}
			if req.ReplayWindow > 0 && clock.reached(rec.UpdatedAt.Add(req.ReplayWindow)) {
				if !write {
					return outNeedWrite, nil
				}
				// Moved aside only once this attempt is admitted (below): one that the read
				// set or the domain refuses leaves the done record where it is, and writes
				// nothing.
				superseded, rec = rec, nil
				break
			}
			p.adm = Admission{Cert: rec.Cert.copy(), RecordedAt: rec.UpdatedAt, ResultNotKept: rec.KeepResult == KeepHash}
			return outReplayed, nil
		case StateFailed, StateUnknown:
			healable := rec.Healable() && (e.mine(rec.Owner) || e.cfg.Liveness(rec.Owner) != Dead)
			pf := PriorFailureError{Intent: req.Intent, State: rec.State, Reason: rec.Reason, Healable: healable, Token: rec.Token}
			if rec.Healable() {
				pf.LeaseUntil, pf.Now = rec.LeaseUntil, clock.now()
			}
			return outRefused, pf
		case StateInFlight:
			switch v, kind, why := e.judge(clock.now(), rec); v {
			case held:
				return outRefused, InFlightError{Intent: req.Intent, Holder: rec.Agent, LeaseUntil: rec.LeaseUntil, Owner: rec.Owner, RerunSafe: rec.RerunSafe, Token: rec.Token}
			case fenceIt:
				// The effect may have happened and nobody may run it again.
				if !write {
					return outNeedWrite, nil
				}
				p.wrote = true
				if err := e.markUnknown(tx, rec, kind, why); err != nil {
					return 0, err
				}
				return outRefused, PriorFailureError{Intent: req.Intent, State: StateUnknown, Reason: why, Healable: kind == EventExpired, LeaseUntil: rec.LeaseUntil, Token: rec.Token, Now: clock.now()}
			default:
				reclaimed, reclaimWhy = rec, why
			}
		default:
			return 0, fmt.Errorf("fence: intent %q has unknown state %q in the ledger", req.Intent, rec.State)
		}
	}

	// Gate 2: the read set.
	for _, r := range req.ReadSet {
		cur, _, err := tx.DomainSeq(r.Domain)
		if err != nil {
			return 0, err
		}
		if _, seen := snap[r.Domain]; !seen {
			// As the attempt arrived: the read-only pass, or the first run of a write pass
			// that had none (a store that retries the write pass keeps what the first saw).
			snap[r.Domain] = cur
		}
		if cur != r.Seq {
			if write && r.Domain == req.Domain && snap[r.Domain] == r.Seq {
				return outRefused, DomainRaceError{Intent: req.Intent, Domain: r.Domain, Expected: r.Seq, Actual: cur}
			}
			return outRefused, StaleReadSetError{Intent: req.Intent, Domain: r.Domain, Expected: r.Seq, Actual: cur}
		}
	}
	if !write {
		return outNeedWrite, nil
	}
	nonce := newNonce()
	if c.note != nil && !c.note.claiming(nonce) {
		return 0, errAbandonedBeforeClaim // answered already: no claim nobody would run
	}

	// Gate 3: reserve the domain's next sequence number. Inside one transaction the
	// compare-and-swap cannot be lost, so a caller contending only for a number never retries.
	var seq uint64
	if req.Domain != "" {
		cur, _, err := tx.DomainSeq(req.Domain)
		if err != nil {
			return 0, err
		}
		seq = cur + 1
		if err := tx.SetDomainSeq(req.Domain, seq); err != nil {
			return 0, err
		}
	}
	p.wrote = true
	if superseded != nil {
		if err := e.supersede(tx, superseded, req.ReplayWindow); err != nil {
			return 0, err
		}
	}
	now := clock.now()
	token, err := tx.NextToken()
	if err != nil {
		return 0, err
	}
	agent := req.Agent
	// The claim keeps its own copies of the caller's slices: a caller may reuse its buffers
	// for its next request, and the memory store keeps the record as given (a read set
	// refilled in place made the commit's re-check find "moved" domains that had not).
	var exact []byte // none with redaction: the exact bytes would carry what it keeps out
	if len(req.Redact) == 0 && form == c {
		exact = bytes.Clone(req.ExactArgs)
	}
	if reclaimed != nil {
		why := fmt.Sprintf("claim %d taken over by claim %d: %s", reclaimed.Token, token, reclaimWhy)
		if err := tx.AppendEvent(Event{At: now, Intent: req.Intent, Kind: EventReclaim, Who: e.cfg.Owner, Reason: why, State: StateInFlight, Token: reclaimed.Token}); err != nil {
			return 0, err
		}
	}
	var keep KeepResult
	if req.KeepResult == KeepHash {
		keep = KeepHash
	}
	var redacted []string
	if len(req.Redact) > 0 {
		redacted = slices.Clone(req.Redact)
	}
	clk, lease := e.ticks.tick(req.Clock, agent), now.Add(e.cfg.LeaseTTL)
	// The claim and its ticket are written as the object is made, with no call in between,
	// which the compiler does with the cheaper barrier of a fresh object (assigning a whole
	// Record to it later moved it with the runtime's bulk barrier while a collection marked).
	ca := &claimAlloc{
		rec: Record{
			Intent: req.Intent, State: StateInFlight, Fingerprint: form.fp, Token: token, Nonce: nonce,
			Owner: e.ownerWith(req.Carrier), Agent: agent, Parent: req.Parent, Domain: req.Domain, Seq: seq,
			Tool: req.Tool, Args: form.stored, ExactArgs: exact, ReadSet: slices.Clone(req.ReadSet), Clock: clk,
			ClaimedAt: now, LeaseUntil: lease, UpdatedAt: now,
			RerunSafe:  req.RerunSafe || e.cfg.OnLeaseExpiry == Reclaim,
			KeepResult: keep, Redacted: redacted,
		},
		ticket: Ticket{Intent: req.Intent, Token: token, Nonce: nonce, Domain: req.Domain, Seq: seq, LeaseUntil: lease, Reclaimed: reclaimed != nil, KeepHash: keep == KeepHash},
	}
	if token == PendingToken {
		if lt, ok := tx.(LateToken); ok {
			lt.BindToken(&ca.rec.Token, &ca.ticket.Token)
		}
	}
	if err := tx.Put(&ca.rec); err != nil {
		return 0, err
	}
	p.adm = Admission{Ticket: &ca.ticket}
	if reclaimed != nil {
		return outReclaimed, nil
	}
	return outAdmitted, nil
}

// doneWithoutCert is the error for a done record that holds no cert: a damaged row (its cert
// member's name altered, or the member edited away) that still reads as JSON. There is
// nothing to replay, and the effect ran, so the attempt is refused; before, the replay (and
// the move of a record past its replay window) dereferenced the missing cert.
func doneWithoutCert(intent string) error {
	return &UnreadableError{Intent: intent, Err: fmt.Errorf("fence: intent %q is recorded done but its record holds no cert (damaged or edited): there is no result to replay, and the call was not run. Its effect happened once already: check the real system, then remove the record (effectfence ledger clear --force) if it is to run again", intent)}
}

// passClock reads a transaction's clock at most once, when a decision first needs it.
type passClock struct {
	tx      Tx
	at      time.Time
	read    bool
	process bool // tx's clock is time.Now, read when asked (see Engine.memWall)
}

func (k *passClock) now() time.Time {
	if !k.read {
		k.at, k.read = k.tx.Now(), true
	}
	return k.at
}

// reached reports whether instant t has come.
func (k *passClock) reached(t time.Time) bool {
	if k.process && !k.read {
		// time.Until reads only the monotonic clock when t carries a reading of it, and
		// compares exactly as t.Before(time.Now()) would; otherwise it reads the wall clock.
		return time.Until(t) <= 0
	}
	return !k.now().Before(t)
}

// claimAlloc holds a claim and its ticket: one allocation.
type claimAlloc struct {
	rec    Record
	ticket Ticket
}

// verdict is what becomes of an in-flight claim another attempt finds.
type verdict int

const (
	held    verdict = iota // the holder keeps it: refuse with intent_in_flight
	fenceIt                // it becomes unknown, fenced until cleared (or healed by its holder)
	takeIt                 // re-running is provably safe: the attempt takes it over
)

// judge applies the rules of docs/RELIABILITY.md to an in-flight claim at time now:
//
//   - holder dead (seen gone, a zombie, or its pid reused): a re-run-safe claim is taken
//     over, any other becomes unknown at once;
//   - lease running: held;
//   - lease lapsed, holder alive and visible: unknown; a live holder is never taken over,
//     whatever its lease says, because it may still be running the effect;
//   - lease lapsed, holder beyond sight (another host or boot, a PID namespace that is not
//     this process's or one below it whose processes this process may read, or an old owner
//     string): a re-run-safe claim is taken over, any other becomes unknown.
//
// kind and why are the audit event's kind and reason.
func (e *Engine) judge(now time.Time, rec *Record) (v verdict, kind, why string) {
	seen := Alive
	if !e.mine(rec.Owner) {
		seen = e.cfg.Liveness(rec.Owner)
	}
	lapsed := !now.Before(rec.LeaseUntil)
	at := rec.LeaseUntil.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	var spooled string // why a re-run-safe claim is not taken over: its outcome may be spooled
	if rec.RerunSafe && (seen == Dead || (lapsed && seen != Alive)) {
		spooled = e.spoolMayHold(rec.Intent)
	}
	switch {
	case seen == Dead && spooled != "":
		return fenceIt, EventOrphan, fmt.Sprintf("holder is gone (process %s) and %s: not taken over though re-run safe; the spool's drain records it", rec.Owner, spooled)
	case seen == Dead && rec.RerunSafe:
		return takeIt, EventReclaim, fmt.Sprintf("holder is gone (process %s) and the call was declared safe to re-run", rec.Owner)
	case seen == Dead:
		return fenceIt, EventOrphan, fmt.Sprintf("holder is gone (process %s); the effect may have happened", rec.Owner)
	case !lapsed:
		return held, "", ""
	case seen == Alive:
		if _, gone, runs := carrierState(rec.Owner); runs && gone {
			return fenceIt, EventExpired, fmt.Sprintf("lease lapsed at %s, holder %s: the effect may still happen; never taken over while that group runs", at, holderWords(rec.Owner))
		}
		return fenceIt, EventExpired, fmt.Sprintf("lease lapsed at %s, holder alive but silent (stalled or stopped: process %s); a live holder is never taken over; its own late result heals this", at, rec.Owner)
	case spooled != "":
		return fenceIt, EventExpired, fmt.Sprintf("lease lapsed at %s, holder out of sight (process %s), and %s: not taken over though re-run safe; the spool's drain records it", at, rec.Owner, spooled)
	case rec.RerunSafe:
		return takeIt, EventReclaim, fmt.Sprintf("lease lapsed at %s, holder out of sight (process %s), and the call was declared safe to re-run", at, rec.Owner)
	}
	return fenceIt, EventExpired, fmt.Sprintf("lease lapsed at %s, holder out of sight (another host or boot, or a PID namespace this process cannot see into: process %s); the effect may have happened; its own late result heals this", at, rec.Owner)
}

// supersede moves a done record out of the way of a new action of its intent: it stays, whole,
// under SupersededIntent until its own expiry, and the move is audited.
//
// That name is also an intent any caller may use, and an earlier move may have taken it (two
// executions of one intent can have the same cert), so the move reads it first (on PostgreSQL
// the read takes its lock) and goes to the next free name of supersededNames if it holds a
// record: it never overwrites one. Each name is longer than the intent it is derived from, so
// two transactions that lock an intent and then such a name never wait on each other in a
// cycle. A name whose record is a done outcome past its result TTL is free: the move takes it.
func (e *Engine) supersede(tx Tx, rec *Record, window time.Duration) error {
	now := tx.Now()
	old := *rec
	old.Intent = ""
	base := SupersededIntent(rec.Intent, rec.Cert.Hash)
	for i := 1; i <= maxSupersededNames && old.Intent == ""; i++ {
		name := supersededName(base, i)
		there, err := tx.Get(name)
		if err != nil {
			return err
		}
		// A done record whose result TTL has passed is forgotten, as the gates forget it (a
		// sweep drops it later): its name is free. Before 2026-12-06 it held its name until
		// a sweep, never on a memory store nobody sweeps, and a call repeated identically
		// (one cert, so one name after another) was refused once all were taken
		// (TestSupersedeTakesTheNameOfAnExpiredRecord).
		if there == nil || (there.State == StateDone && !there.ExpiresAt.IsZero() && !now.Before(there.ExpiresAt)) {
			old.Intent = name
		}
	}
	if old.Intent == "" {
		// Every numbered name is held: a name of its own (TestSupersedeRepeatedPastTheNames).
		name := spareSupersededName(base)
		there, err := tx.Get(name)
		if err != nil {
			return err
		}
		if there != nil { // 128 random bits: never, but the move never overwrites
			return fmt.Errorf("fence: intent %q is done and its replay window has passed, but its record cannot be moved aside: %s, the %d names after it and %s hold other records; try again",
				rec.Intent, base, maxSupersededNames-1, name)
		}
		old.Intent = name
	}
	if err := tx.Put(&old); err != nil {
		return err
	}
	why := fmt.Sprintf("an identical attempt came %s after the commit, beyond the replay window of %s: a new action; the done record is kept as %s",
		now.Sub(rec.UpdatedAt).Round(time.Millisecond), window, old.Intent)
	return tx.AppendEvent(Event{At: now, Intent: rec.Intent, Kind: EventSuperseded, Who: e.cfg.Owner, Reason: why, State: StateDone, Token: rec.Token})
}

func (e *Engine) markUnknown(tx Tx, rec *Record, kind, why string) error {
	now := tx.Now()
	next := *rec
	next.State, next.Reason, next.UpdatedAt = StateUnknown, why, now
	if err := tx.Put(&next); err != nil {
		return err
	}
	return tx.AppendEvent(Event{At: now, Intent: rec.Intent, Kind: kind, Who: e.cfg.Owner, Reason: why, State: rec.State})
}

func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	h := nonceHex(&b)      // on the stack: the string is the only allocation
	return string(h[:])
}

// nonceHex is hex.Encode of b's 16 bytes: one load of canon's table per byte (HexPair, as
// canon.SumTo writes digests), a third of hex.Encode's instructions, which were a third of
// making a nonce.
func nonceHex(b *[16]byte) (h [32]byte) {
	for i, v := range b {
		*(*[2]byte)(h[2*i : 2*i+2]) = canon.HexPair(v)
	}
	return h
}

// Prepare passes req through the gates. It returns an Admission with a Ticket (run the effect
// now, then Commit, Abort or Release) or with a Cert (do not run it; use the recorded result).
// Any error means: do not run the effect. The claim keeps copies of req's slices: the caller
// may reuse them once Prepare returns.
func (e *Engine) Prepare(ctx context.Context, req Request) (Admission, error) {
	// Small enough to be inlined into the caller: a frame of its own, which copied the answer
	// twice on its way back, was a thirtieth of a replay.
	return e.prepareMem(ctx, &req)
}

// preparePooled is Prepare with a pass from the pool: on a store other than the memory store,
// or with a read set.
func (e *Engine) preparePooled(ctx context.Context, req *Request) (Admission, error) {
	p := getPass(e)
	defer putPass(p)
	p.req = *req
	p.c.note = nil // a pooled pass keeps the last one's (validate sets the rest)
	if err := e.validate(&p.req, &p.c); err != nil {
		return Admission{}, err
	}
	err := p.prepare(ctx)
	e.count(p.out, err, false)
	if err != nil {
		return Admission{}, err
	}
	return p.adm, nil
}

// prepareMem is Prepare on the memory store for a request without a read set (which would
// need a snapshot); any other request goes to preparePooled. Its pass lives on this
// goroutine's stack, and its gates read the caller's request where it is: the store is called
// as *MemoryStore, whose View and Update do not keep their funcs, so nothing here escapes. No
// pool, and no copy of the request (into a heap object while a collection marks, that copy
// cost a fifth of a replay).
func (e *Engine) prepareMem(ctx context.Context, req *Request) (Admission, error) {
	if e.mem == nil || len(req.ReadSet) > 0 {
		return e.preparePooled(ctx, req)
	}
	var p pass
	p.e = e
	if err := e.validate(req, &p.c); err != nil {
		return Admission{}, err
	}
	run := func(tx Tx) error { return p.run(tx, req) }
	err := e.mem.View(ctx, run)
	if err == nil && p.out == outNeedWrite {
		p.write = true
		err = e.updateMem(ctx, run, &p)
	}
	if _, ok := err.(abandonedMet); ok {
		return e.preparePooled(ctx, req) // which releases it (a claim given up: beside.go)
	}
	if err == nil && p.out == outReplayed {
		e.counts.add(bReplayed) // what count does for a replay, without its call and tests
	} else {
		e.count(p.out, err, false)
	}
	if err != nil {
		return Admission{}, err
	}
	return p.adm, nil
}

// pass is one attempt's trip through the gates.
type pass struct {
	e     *Engine
	c     call
	write bool
	wrote bool // the write pass wrote (a claim, a supersede, an unknown mark)
	snap  snapshot
	out   outcome
	adm   Admission
}

// pooledPass is a pass from the pool with its own copy of the request. fn is bound once when a
// pass is made, so handing it to the store allocates nothing.
type pooledPass struct {
	pass
	req Request
	fn  func(Tx) error
}

var passPool = sync.Pool{New: func() any {
	p := &pooledPass{}
	p.fn = p.runOwn
	return p
}}

func getPass(e *Engine) *pooledPass {
	p := passPool.Get().(*pooledPass)
	p.e = e
	return p
}

// putPass returns p to the pool. Its fields are not zeroed (the next use overwrites each one
// before reading it; zeroing a pooled struct full of pointers costs write barriers); what
// it still references lives at most until the pool is emptied at the next collection.
func putPass(p *pooledPass) {
	if len(p.snap) > 0 {
		clear(p.snap)
	}
	passPool.Put(p)
}

func (p *pass) run(tx Tx, req *Request) error {
	p.wrote = false
	var err error
	p.out, err = p.gate(tx, req)
	return err
}

func (p *pooledPass) runOwn(tx Tx) error { return p.run(tx, &p.req) }

// WriteFirst is implemented by a store whose write transaction answers a replay or a refusal
// at about the cost of a read-only one (PostgreSQL: a round trip to read and one to end the
// transaction either way). For such a store the engine skips its read-only pass for an
// intent it has not seen recorded (a first attempt, which must write anyway) and lets the
// write transaction decide everything; a pass that writes nothing leaves the counters
// unwritten. An intent it has seen (a retry, most likely a replay) still takes the read-only
// pass, which needs neither the intent's lock nor a transaction id. SQLite is one too: its
// read transaction costs about as much as a write transaction that writes nothing (which
// appends nothing to the WAL and syncs nothing). The memory store, whose read costs a map
// lookup, always takes the read-only pass first. New asks once: the answer must not change.
type WriteFirst interface {
	WriteFirst() bool
}

// LateToken may be implemented by a Tx that learns a fresh claim's fencing token only as the
// claim is written (PostgreSQL's one-statement claim: the token is drawn by the statement that
// writes the record). Its NextToken then answers PendingToken, and the engine, before it Puts
// the claim, names with BindToken every place it keeps that token; the Tx writes the real token
// there once the claim is recorded, before Update returns. A Tx given no BindToken, or a
// record whose token is not PendingToken, writes nothing with the placeholder.
type LateToken interface {
	BindToken(dst ...*uint64)
}

// PendingToken is the placeholder NextToken of a LateToken Tx answers. No store hands it out
// as a real token (PostgreSQL's sequence would need 2^63-1 claims to reach it).
const PendingToken uint64 = 1<<63 - 1

// DomainPrefetcher may be implemented by a Tx whose reads cost a round trip: the engine names
// the domains it is about to read, and the Tx fetches them along with its next Get. DomainSeq
// then answers from what was fetched.
type DomainPrefetcher interface {
	PrefetchDomain(domain string)
}

func (e *Engine) prepare(ctx context.Context, req *Request, c *call) (outcome, Admission, error) {
	p := getPass(e)
	defer putPass(p)
	p.req, p.c = *req, *c
	err := p.prepare(ctx)
	return p.out, p.adm, err
}

// prepare passes p.req through the gates; the outcome and the answer are left in p.out and
// p.adm. A pass that meets a claim this engine abandoned (beside.go) releases it and asks
// again, as often as it meets one (each release ends one of them).
func (p *pooledPass) prepare(ctx context.Context) error {
	for {
		err := p.prepareOnce(ctx)
		a, ok := err.(abandonedMet)
		if !ok {
			return err
		}
		if err := p.e.releaseAbandoned(ctx, a); err != nil {
			p.out = 0
			return fmt.Errorf("fence: intent %q is held by a claim this process gave up before it landed (its call never sent), and releasing it failed: %w", a.intent, err)
		}
	}
}

// prepareOnce is one trip of prepare through the gates.
func (p *pooledPass) prepareOnce(ctx context.Context) error {
	e := p.e
	p.out, p.adm = 0, Admission{} // a store failing before it runs fn leaves no stale answer
	if len(p.req.ReadSet) > 0 && p.snap == nil {
		p.snap = snapshot{} // only attempts with a read set need one
	}
	wf := e.wf
	if !wf || e.known.has(p.req.Intent) {
		// The read-only pass answers replays and refusals without the writer. A WriteFirst
		// store skips it for an intent this engine has not seen recorded (a first attempt,
		// which must write anyway) and keeps it for one it has (a retry, likely a replay).
		p.write = false
		if err := e.store.View(ctx, p.fn); err != nil || p.out != outNeedWrite {
			return err
		}
	}
	p.write = true
	err := e.updateWith(ctx, p.fn, &p.pass)
	if wf && (err == nil || CodeOf(err) != CodeStore) {
		e.known.add(p.req.Intent) // it has a record now (or had one that refused this attempt)
	}
	if err != nil && p.adm.Ticket != nil && CodeOf(err) == CodeStore {
		// The claim was written but the store failed: it may be recorded all the same
		// (its answer lost), held by nobody who will ever run it (orphan.go).
		e.lostClaimNoted(p.adm.Ticket.Intent, p.adm.Ticket.Nonce)
	}
	return err
}

// knownIntents is a bounded set of intents; it starts over when full rather than track
// recency (a miss only costs a replay its fast path).
type knownIntents struct {
	mu sync.RWMutex
	m  map[string]struct{}
}

const knownIntentsMax = 4096

func (k *knownIntents) has(intent string) bool {
	k.mu.RLock()
	_, ok := k.m[intent]
	k.mu.RUnlock()
	return ok
}

func (k *knownIntents) add(intent string) {
	k.mu.Lock()
	if k.m == nil || len(k.m) >= knownIntentsMax {
		k.m = make(map[string]struct{}, 64)
	}
	k.m[intent] = struct{}{}
	k.mu.Unlock()
}

// count puts one attempt in its bucket.
func (e *Engine) count(out outcome, err error, waited bool) { e.Count(decide(out, err, waited)) }

// decide returns the bucket of an attempt's answer.
func decide(out outcome, err error, waited bool) Decision {
	var b bucket
	switch {
	case err == nil && out == outAdmitted:
		b = bAdmitted
	case err == nil && out == outReclaimed:
		b = bReclaimed
	case err == nil && out == outReplayed && waited:
		b = bCoalesced
	case err == nil && out == outReplayed:
		b = bReplayed
	case errors.Is(err, ErrStaleReadSet):
		b = bStale
	case errors.Is(err, ErrDomainRace):
		b = bRace
	case errors.Is(err, ErrInFlight), errors.Is(err, ErrFailedWait):
		// A waiter given the failure of the attempt it waited for did not run: refused in
		// flight, as a waiter given it by its own process is (wrap's flights).
		b = bInFlight
	case errors.Is(err, ErrPriorFailure):
		b = bPriorFailure
	case errors.Is(err, ErrConflict):
		b = bConflict
	default:
		return Decision{} // store errors and invalid requests are not attempts the fence decided
	}
	return Decision{b: b, ok: true}
}

// update runs fn in a write transaction and folds this process's unflushed counters into the
// ledger in the same transaction, so counting costs no extra write; a store that would write a
// page only for them (CountersDeferred) has them wait for a later transaction.
//
// A refusal (an error with a fence code) is the answer, not a failure of the transaction: the
// transaction commits whatever fn wrote before refusing (marking an orphaned intent unknown,
// say) and update returns the refusal. Only other errors roll fn back. This also spares a
// group-committing store from undoing a whole batch because one attempt was refused.
func (e *Engine) update(ctx context.Context, fn func(Tx) error) error {
	return e.updateWith(ctx, fn, nil)
}

// updater carries update's state into the store's transaction; pooled, with run bound once.
type updater struct {
	fn      func(Tx) error
	delta   Counters
	refusal error
	p       *pass // when set and the pass wrote nothing, the counters wait for a later write
	force   bool  // Flush: the counters are written even where the store would defer them
	kept    bool  // the counters were not written: they wait for a later write
	run     func(Tx) error
}

var updaterPool = sync.Pool{New: func() any {
	u := &updater{}
	u.run = u.do
	return u
}}

func (u *updater) do(tx Tx) error {
	var err error
	u.refusal, u.kept, err = counted(tx, u.fn, u.delta, u.p, u.force)
	return err
}

// counted runs fn in tx and adds delta to the ledger's counters; a refusal from fn is
// returned apart, as the answer, and does not undo the transaction. kept says the counters
// were not added: the pass wrote nothing, or the store defers them (CountersDeferred) and
// force is not set.
func counted(tx Tx, fn func(Tx) error, delta Counters, p *pass, force bool) (refusal error, kept bool, err error) {
	if err := fn(tx); err != nil {
		var coded Coded
		if !errors.As(err, &coded) {
			return nil, false, err
		}
		refusal = err
	}
	if delta.IsZero() {
		return refusal, false, nil
	}
	if p != nil && !p.wrote {
		return refusal, true, nil
	}
	if d, ok := tx.(CountersDeferred); ok && !force && d.DeferCounters() {
		return refusal, true, nil
	}
	return refusal, false, tx.AddCounters(delta)
}

func (e *Engine) updateWith(ctx context.Context, fn func(Tx) error, p *pass) error {
	return e.updateCounted(ctx, fn, p, false)
}

// updateCounted is updateWith; with force, the counters are written even where the store
// would defer them (Flush).
func (e *Engine) updateCounted(ctx context.Context, fn func(Tx) error, p *pass, force bool) error {
	u := updaterPool.Get().(*updater)
	u.fn, u.p, u.delta, u.refusal, u.force, u.kept = fn, p, e.counts.take(), nil, force, false
	err := e.store.Update(ctx, u.run)
	delta, refusal, kept := u.delta, u.refusal, u.kept
	*u = updater{run: u.run}
	updaterPool.Put(u)
	return e.updated(err, delta, refusal, kept)
}

// updateMem is updateWith on the memory store, with its updater on the stack (see
// prepareMem).
func (e *Engine) updateMem(ctx context.Context, fn func(Tx) error, p *pass) error {
	delta := e.counts.take()
	var refusal error
	var kept bool
	err := e.mem.Update(ctx, func(tx Tx) error {
		var err error
		refusal, kept, err = counted(tx, fn, delta, p, false)
		return err
	})
	return e.updated(err, delta, refusal, kept)
}

// updated ends updateWith: err is the store's, delta the counters it was to write, refusal
// the pass's own answer and kept whether the transaction left the counters out.
func (e *Engine) updated(err error, delta Counters, refusal error, kept bool) error {
	if err == nil && kept {
		err = errUnwritten // the counters were not written: give them back
	}
	if err != nil {
		// A store that answers for the counters of a commit whose answer was lost
		// (CountersKept) adds them itself if the commit did not land.
		if !delta.IsZero() && (err == errUnwritten || !countersKept(err)) {
			e.counts.give(delta)
		}
		if err == errUnwritten {
			return refusal
		}
		return err
	}
	return refusal
}

var errUnwritten = errors.New("fence: counters not written")

// holds checks that rec is the live claim of ticket t.
func holds(rec *Record, t Ticket) error {
	switch {
	case rec == nil:
		return LeaseLostError{Intent: t.Intent, Token: t.Token, Why: "no claim is recorded: it was cleared, released or never made"}
	case rec.Token != t.Token || rec.Nonce != t.Nonce:
		return LeaseLostError{Intent: t.Intent, Token: t.Token, Why: fmt.Sprintf("the intent is held by claim %d (%s)", rec.Token, rec.State)}
	case rec.State != StateInFlight:
		return LeaseLostError{Intent: t.Intent, Token: t.Token, Why: "the claim already ended as " + string(rec.State)}
	}
	return nil
}

// intentFault says why Prepare refuses intent in ("" when it takes it); nul says the fault is
// a NUL byte, which Prepare admitted until 2026-12-02 (see claimless).
func intentFault(in string) (why string, nul bool) {
	switch {
	case in == "":
		return "must not be empty: name the logical action, e.g. charge:order-123", false
	case len(in) > MaxIntentLen:
		return fmt.Sprintf("is %d bytes; at most %d", len(in), MaxIntentLen), false
	case !validUTF8(in):
		return "must be valid UTF-8", false
	case strings.IndexByte(in, 0) >= 0:
		// PostgreSQL text cannot hold a NUL: every store refuses it alike.
		return "must not contain a NUL byte", true
	}
	return "", false
}

// claimless refuses a ticket whose intent no claim can have: one Prepare refuses (empty, longer
// than MaxIntentLen, not UTF-8, a NUL byte), so no ledger holds a claim of it, and its report is
// lease_lost at once, as a report of any ticket that holds no claim is. Asked of the store, a
// PostgreSQL ledger refused such an intent with an error of its own (invalid byte sequence for
// encoding "UTF8"), which Settle took for the ledger failing: until 2026-12-06 the outcome was
// answered as kept in the spool, where no drain could ever record it
// (TestTicketOfAnIntentNoClaimCanHaveIsLeaseLost).
//
// A NUL byte is the exception: Prepare admitted it until 2026-12-02, and a SQLite or memory
// ledger may hold a claim of it, whose outcome (kept in the spool by that build, or reported
// by a holder across the upgrade) must be recorded; it was refused, its spool file deleted as
// answered (TestClaimOfAnOlderBuildWithANulIsRecorded). Such a ticket is refused only when
// its ledger has no record of the intent, which a PostgreSQL ledger answers without a query.
func (e *Engine) claimless(ctx context.Context, t Ticket) error {
	in := t.Intent
	why, nul := intentFault(in)
	if why == "" {
		return nil
	}
	if nul {
		var rec *Record
		err := e.store.View(ctx, func(tx Tx) error {
			var err error
			rec, err = tx.Get(in)
			return err
		})
		if err != nil || rec != nil {
			return nil // the report itself is judged against the record (or fails as the ledger does)
		}
	}
	return LeaseLostError{Intent: in, Token: t.Token, Why: "no claim is recorded: no claim can have that intent, which Prepare refuses"}
}

// Commit records the result of an admitted effect and returns its cert. The result is one JSON
// value (empty: null), kept byte for byte, nested at most 10,000 deep; anything else is refused
// as invalid (InvalidError) and nothing is recorded: the ticket still holds its claim, for a
// Commit of a result that is, or an Abort (the effect ran). It re-validates the read set: if any domain moved while the effect ran, the effect ran on stale state, the intent
// becomes failed and a StaleReadSetError with Executed set is returned. The holder retrying a
// commit that already landed gets the recorded cert. Any other ticket that no longer holds the
// intent gets LeaseLostError and changes nothing. Commit keeps its own copy of result; the
// returned cert's Args, Result, ReadSet and Clock are shared with the ledger's record, as a
// replayed cert's are (see Admission).
//
// ctx bounds the ledger write: a Commit whose ctx ends first returns its error and may have
// recorded nothing. The effect is then never run again (the claim stays in flight, then
// unknown once its lease lapses), but its result is not recorded either. To record an effect
// that ran whatever becomes of the caller, pass context.WithoutCancel(ctx), or use Settle,
// which keeps the outcome in the spool while the ledger does not take it.
func (e *Engine) Commit(ctx context.Context, t Ticket, result []byte) (*Cert, error) {
	if err := e.standing(ctx, Outcome{Kind: OutcomeCommit, Ticket: t, Result: result}); err != nil {
		return nil, err
	}
	return e.commit(ctx, t, result, false)
}

// commit is Commit; retry says a report of this outcome may have landed already, its answer
// lost (see Engine.apply).
func (e *Engine) commit(ctx context.Context, t Ticket, result []byte, retry bool) (*Cert, error) {
	if err := e.claimless(ctx, t); err != nil {
		e.afterOutcome(t.Intent, err)
		return nil, err
	}
	if len(result) == 0 {
		result = []byte("null")
	}
	// The result is recorded exactly as the tool returned it (replays are byte for byte);
	// the cert's hash covers its digest.
	if why := resultFault(result); why != "" {
		return nil, InvalidError{"result", why}
	}
	var (
		cert *Cert
		err  error
	)
	if e.mem != nil {
		// On the stack, as in prepareMem.
		k := committer{e: e, t: t, res: bytes.Clone(result), retry: retry}
		err = e.updateMem(ctx, k.run, nil)
		cert = k.cert
	} else {
		k := committerPool.Get().(*committer)
		k.e, k.t, k.res, k.retry = e, t, bytes.Clone(result), retry
		err = e.update(ctx, k.fn)
		cert = k.cert
		*k = committer{fn: k.fn}
		committerPool.Put(k)
	}
	e.afterOutcome(t.Intent, err)
	if err != nil {
		return nil, err
	}
	return cert, nil
}

// resultFault says why a result cannot be recorded ("" when it can): it must be one JSON value,
// nested at most canon.MaxDepth deep (what encoding/json reads back). A value nested deeper
// is JSON all the same (encoding/json writes it), and is named so: before 2026-12-07 it was
// refused as "not a JSON value" (TestResultNestedTooDeepIsNamedSo).
func resultFault(result []byte) string {
	switch {
	case canon.Valid(result):
		return ""
	case canon.ValidAnyDepth(result):
		return fmt.Sprintf("nested deeper than %d levels, which JSON readers do not take back; nothing was recorded", canon.MaxDepth)
	}
	return "not a JSON value"
}

// committer is Commit's transaction; pooled, with fn bound once.
type committer struct {
	e   *Engine
	t   Ticket
	res []byte
	// retry: an earlier attempt of this commit failed with the ledger's error, and may have
	// landed all the same (see Engine.apply).
	retry bool
	cert  *Cert // the answer: a copy the caller owns
	fn    func(Tx) error
}

var committerPool = sync.Pool{New: func() any {
	k := &committer{}
	k.fn = k.run
	return k
}}

// certAlloc is a recorded cert and the hex digits of its two digests, which its ResultSHA256
// and Hash point into: one object of 352 bytes where a cert and a string were two (an
// allocation less per commit, an object less for the collector to mark per record).
type certAlloc struct {
	cert    Cert
	digests [2 * canon.SumLen]byte
}

// bodyBufs recycles the buffers certs' canonical bodies are hashed from.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (k *committer) run(tx Tx) error {
	e, t, res := k.e, k.t, k.res
	k.cert = nil
	rec, err := tx.Get(t.Intent)
	if err != nil {
		return err
	}
	if rec != nil && rec.State == StateDone && rec.Cert != nil && rec.Token == t.Token && rec.Nonce == t.Nonce && t.Nonce != "" {
		// A retried commit whose first attempt landed (its answer was lost): the same
		// ticket gets the recorded cert, and nothing is written again.
		recorded := *rec.Cert
		k.cert = &recorded
		return nil
	}
	if k.retry && rec != nil && rec.State == StateFailed && rec.Token == t.Token && rec.Nonce == t.Nonce && t.Nonce != "" {
		// A retried commit whose earlier attempt found the read set moved and recorded the
		// intent failed (only that keeps the claim's nonce on a failed record), its answer
		// lost: the same refusal, and nothing is written again. (A commit that is no retry
		// is refused lease_lost here, as a second commit of one ticket always was.)
		return staleAgain(tx, rec)
	}
	healing := heals(rec, t)
	if !healing {
		if err := holds(rec, t); err != nil {
			return e.lateResult(tx, t, err, lateCommitWhat(rec, t, res), rec, k.retry)
		}
	}
	now := tx.Now()
	for _, r := range rec.ReadSet {
		want := r.Seq
		if r.Domain == rec.Domain {
			want = rec.Seq // our own reservation moved it by one
		}
		cur, _, err := tx.DomainSeq(r.Domain)
		if err != nil {
			return err
		}
		if cur != want {
			// The effect ran on stale state: record the intent failed (a refusal commits
			// what was written) and say so.
			failed := *rec
			failed.State, failed.UpdatedAt = StateFailed, now
			failed.Reason = fmt.Sprintf("read set went stale while the effect ran: domain %q moved from %d to %d", r.Domain, want, cur)
			if err := tx.Put(&failed); err != nil {
				return err
			}
			if err := tx.AppendEvent(Event{At: now, Intent: rec.Intent, Kind: EventStale, Who: e.cfg.Owner, Reason: failed.Reason, State: rec.State}); err != nil {
				return err
			}
			return StaleReadSetError{Intent: rec.Intent, Domain: r.Domain, Expected: want, Actual: cur, Executed: true}
		}
	}
	done, err := e.doneRecord(rec, res, now)
	if err != nil {
		return err
	}
	c := done.Cert
	if err := tx.Put(done); err != nil {
		return err
	}
	if healing {
		why := fmt.Sprintf("the claim's own late commit (cert %s) resolves the unknown outcome (%s)", c.Hash, rec.Reason)
		if err := tx.AppendEvent(Event{At: now, Intent: rec.Intent, Kind: EventHeal, Who: rec.Agent, Reason: why, State: StateUnknown}); err != nil {
			return err
		}
	}
	k.cert = c.copy()
	return nil
}

// staleAgain is the refusal a commit of rec's claim got when it found the read set moved,
// read again from the domains as they are now: a domain only moves forward (an evicted one
// comes back above every number it had), so the one that had moved still has.
func staleAgain(tx Tx, rec *Record) error {
	for _, r := range rec.ReadSet {
		want := r.Seq
		if r.Domain == rec.Domain {
			want = rec.Seq
		}
		cur, _, err := tx.DomainSeq(r.Domain)
		if err != nil {
			return err
		}
		if cur != want {
			return StaleReadSetError{Intent: rec.Intent, Domain: r.Domain, Expected: want, Actual: cur, Executed: true}
		}
	}
	return StaleReadSetError{Intent: rec.Intent, Executed: true}
}

// doneRecord builds the done record of rec with result res and its cert, under the claim's
// privacy settings (a KeepHash claim keeps only the result's digest). The nonce stays on the
// record, so that the holder's retried commit is recognised (Resolve removes it).
//
// The record and the cert are written into their objects as literals, field by field, as they
// are made: while the collector marks (for much of a fresh call's life once the ledger holds
// many records), each pointer then goes through the compiler's one-entry barrier for a new
// object, where copying the claim into it by assignment went through the runtime's bulk
// barrier, which walks the type's pointer bitmap and logs old and new values.
// TestDoneRecordCopiesEveryField checks that no field of the claim is left behind.
//
// The record (416 bytes) and the cert with its digests (352) are two objects, not one: the
// collector marks objects of up to 512 bytes span by span, each span's marked objects together
// in the order they were allocated, but a larger object alone, when the pointer to it is
// found. The ledger's records are found in the order of the memory store's map, a hash order,
// so a record and cert of 640 bytes in one object were each a cache miss. A collection with
// 300,000 done records live took 1.45-2.10 µs per record that way and 0.79-1.12 µs split in
// two (forced collections, 8 interleaved rounds). The cert's digests share its object
// (certAlloc), so the split costs no allocation.
func (e *Engine) doneRecord(rec *Record, res []byte, now time.Time) (*Record, error) {
	var sum [canon.SumLen]byte
	canon.SumTo(&sum, res)
	args := rec.Args
	if escapedByOldStores(args) {
		// A claim recorded by an earlier build, whose store re-escaped its args: the cert is
		// hashed over, and the done record keeps, their canonical form.
		if canonical, err := canon.JSON(args); err == nil {
			args = canonical
		}
	}
	readSet := rec.ReadSet
	if readSet == nil {
		readSet = []ReadSetEntry{} // the cert's read set is never null
	}
	ca := &certAlloc{cert: Cert{
		Intent: rec.Intent, Parent: rec.Parent, Domain: rec.Domain, Seq: rec.Seq, Tool: rec.Tool,
		Args: args, Result: keptResult(rec.KeepResult, res, &sum), Clock: rec.Clock,
		ReadSet: readSet, Agent: rec.Agent,
	}}
	c := &ca.cert
	bp := bodyBufs.Get().(*[]byte)
	body, err := c.appendCanonicalBody((*bp)[:0], orNull(c.Args), nil, &sum) // args were canonicalised on the way in
	if err == nil {
		copy(ca.digests[:canon.SumLen], sum[:])
		canon.SumTo((*[canon.SumLen]byte)(ca.digests[canon.SumLen:]), body)
		// Nothing writes the digests' bytes again: the strings may point into them.
		both := unsafe.String(&ca.digests[0], len(ca.digests))
		c.ResultSHA256, c.Hash = both[:canon.SumLen], both[canon.SumLen:]
	}
	if cap(body) <= 64<<10 {
		*bp = body[:0]
		bodyBufs.Put(bp)
	}
	if err != nil {
		return nil, err
	}
	return &Record{
		Intent: rec.Intent, State: StateDone, Fingerprint: rec.Fingerprint, Token: rec.Token,
		Nonce: rec.Nonce, Owner: rec.Owner, Agent: rec.Agent, Parent: rec.Parent,
		Domain: rec.Domain, Seq: rec.Seq, Tool: rec.Tool, Args: args, ExactArgs: rec.ExactArgs,
		ReadSet: rec.ReadSet, Clock: rec.Clock, ClaimedAt: rec.ClaimedAt,
		LeaseUntil: rec.LeaseUntil, UpdatedAt: now, ExpiresAt: now.Add(e.cfg.ResultTTL),
		RerunSafe: rec.RerunSafe, KeepResult: rec.KeepResult, Redacted: rec.Redacted, Cert: c,
	}, nil
}

// Abort reports that the effect's outcome is unknown (it may or may not have happened): the
// intent becomes failed and is fenced until an operator clears it.
func (e *Engine) Abort(ctx context.Context, t Ticket, reason string) error {
	if err := e.standing(ctx, Outcome{Kind: OutcomeAbort, Ticket: t, Reason: reason}); err != nil {
		return err
	}
	return e.end(ctx, t, EventAbort, reason, false)
}

// Release reports that the effect definitely did not happen: the intent is free again and the
// next attempt runs. The domain sequence number it reserved stays used (a gap), because a
// number others may have read must never come back.
func (e *Engine) Release(ctx context.Context, t Ticket, reason string) error {
	if err := e.standing(ctx, Outcome{Kind: OutcomeRelease, Ticket: t, Reason: reason}); err != nil {
		return err
	}
	return e.end(ctx, t, EventRelease, reason, false)
}

// Lost reports that the holder lost track of the effect mid-call (the transport broke, the
// tool's process died): the intent becomes unknown, fenced until an operator clears it, just
// as if the holder itself had vanished.
func (e *Engine) Lost(ctx context.Context, t Ticket, reason string) error {
	if err := e.standing(ctx, Outcome{Kind: OutcomeLost, Ticket: t, Reason: reason}); err != nil {
		return err
	}
	return e.end(ctx, t, EventLost, reason, false)
}

// end records a release, abort or lost of ticket t; retry says a report of this outcome may
// have landed already, its answer lost (see Engine.apply).
func (e *Engine) end(ctx context.Context, t Ticket, kind, reason string, retry bool) error {
	if err := e.claimless(ctx, t); err != nil {
		e.afterOutcome(t.Intent, err)
		return err
	}
	reason = ledgerText(reason)
	err := e.update(ctx, func(tx Tx) error {
		rec, err := tx.Get(t.Intent)
		if err != nil {
			return err
		}
		if !heals(rec, t) {
			if err := holds(rec, t); err != nil {
				if retry {
					if landed, lerr := reported(tx, rec, t, kind, reason); lerr != nil || landed {
						return lerr
					}
				}
				return e.lateResult(tx, t, err, fmt.Sprintf("late %s refused; its reason: %s", kind, reason), rec, false)
			}
		}
		now := tx.Now()
		if kind == EventRelease || kind == EventFailure {
			if err := tx.Delete(rec.Intent); err != nil {
				return err
			}
		} else {
			failed := *rec
			failed.State, failed.Reason, failed.UpdatedAt, failed.Nonce = StateFailed, reason, now, ""
			if kind == EventLost {
				failed.State = StateUnknown
			}
			if err := tx.Put(&failed); err != nil {
				return err
			}
		}
		return tx.AppendEvent(Event{At: now, Intent: rec.Intent, Kind: kind, Who: rec.Agent, Reason: reason, State: rec.State, Token: t.Token})
	})
	e.afterOutcome(t.Intent, err)
	return err
}

// reported says whether the ledger shows that the holder of ticket t already reported this
// very outcome (kind and reason), rec being the intent's record now: for a retry of a
// release, abort or lost whose earlier attempt landed but whose answer was lost (the
// connection died after the commit, and the store could not tell). The retry is then
// answered as the first would have been, and writes nothing: refusing it as a late result
// would tell the holder that nothing was recorded, and count a lease lost that was not.
//
// An abort or lost leaves the claim's record with its token, its state and the reason, the
// nonce cleared; a release leaves no record, so the audit trail's release event, which
// carries the claim's token, tells (every store keeps events' tokens; the SQLite store since
// its events table got a token column, sqlite.eventTokens).
func reported(tx Tx, rec *Record, t Ticket, kind, reason string) (bool, error) {
	if t.Token == 0 || t.Nonce == "" {
		return false, nil
	}
	if rec != nil && rec.Token == t.Token && rec.Nonce == "" && rec.Reason == reason &&
		((kind == EventAbort && rec.State == StateFailed) || (kind == EventLost && rec.State == StateUnknown)) {
		return true, nil
	}
	found := false
	err := tx.Events(t.Intent, func(ev Event) bool {
		found = ev.Kind == kind && ev.Token == t.Token && ev.Reason == reason
		return !found
	})
	return found, err
}

// heals reports whether ticket t is the very claim recorded in rec that went unknown only
// because its lease lapsed or its holder looked dead: its late settle is accepted.
func heals(rec *Record, t Ticket) bool {
	return rec != nil && rec.Healable() && t.Nonce != "" && rec.Token == t.Token && rec.Nonce == t.Nonce
}

// lateCommitWhat is what the audit trail keeps of a refused late commit: its result, or only
// the result's digest when the claim kept only that (its ticket says so, or the record is still
// that claim's), so that a hash-only result does not reach the ledger this way either.
func lateCommitWhat(rec *Record, t Ticket, res []byte) string {
	if t.KeepHash || (rec != nil && rec.Token == t.Token && rec.KeepResult == KeepHash) {
		sum, err := ResultSHA256(res)
		if err != nil {
			sum = canon.Sum(res)
		}
		return "late commit refused; its result was not kept (keep_result hash), its SHA-256: " + sum
	}
	return fmt.Sprintf("late commit refused; its result: %s", res)
}

// lateResult records in the audit trail what a settle that no longer holds the intent
// reported (the claim was cleared, released or replaced), so nothing it said is lost, and
// returns the refusal lost. A ticket naming no claim this ledger ever made (token 0, or no
// nonce) leaves no trace. Any other is recorded, a forged one too: whether a ledger issued a
// ticket cannot be told from a record it no longer has (a claim taken over, cleared or
// released carries no token in those events, and one forgotten by a restore from a copy may
// share its token with a new claim, or be above the restored sequence), and refusing those
// without a trace dropped real outcomes (docs/DECISIONS.md, "A late result is kept whatever its
// ticket names"; TestLateReportOfAClaimARestoreForgotIsKept). A retry whose earlier attempt
// the store knows recorded (EarlierAttempt) is refused saying so; so is a retried commit
// (retriedCommit) whose earlier attempt the audit trail shows recorded, or cannot show was not
// (earlierCommit). rec is the intent's record as the settle found it.
func (e *Engine) lateResult(tx Tx, t Ticket, lost error, what string, rec *Record, retriedCommit bool) error {
	if ll, ok := lost.(LeaseLostError); ok {
		if ea, ok := tx.(EarlierAttempt); ok {
			ll.Landed, ll.MayHaveLanded = ea.EarlierAttempt(t.Intent, t.Token, t.Nonce)
		}
		if retriedCommit && !ll.Landed {
			// The audit trail says more than the store's doubt can (it "may have landed"
			// where txid_status, say, could not tell) when the event that ended the claim
			// names it: done, it was recorded; in flight or unknown, it was not, and cannot
			// have been since.
			landed, maybe, err := earlierCommit(tx, rec, t)
			if err != nil {
				return err
			}
			switch {
			case landed:
				ll.Landed, ll.MayHaveLanded = true, false
			case !maybe:
				ll.MayHaveLanded = false
			default:
				ll.MayHaveLanded = true
			}
		}
		lost = ll
	}
	if t.Token == 0 || t.Nonce == "" {
		return lost
	}
	st := StateNone
	if rec, err := tx.Get(t.Intent); err != nil {
		return err
	} else if rec != nil {
		st = rec.State
	}
	why := ledgerText(fmt.Sprintf("claim %d: %s (%v)", t.Token, what, lost)) // what may quote a result
	if err := tx.AppendEvent(Event{At: tx.Now(), Intent: t.Intent, Kind: EventLateResult, Who: e.cfg.Owner, Reason: why, State: st}); err != nil {
		return err
	}
	return lost
}

// earlierCommit says, from the ledger alone, whether an earlier attempt of the commit of
// ticket t, retried because that attempt failed with the ledger's error (it may have landed,
// its answer lost), was recorded before the intent's record changed under it; rec is the
// record now. The process retrying need not be the one that sent it (a spool drained by
// another process on the host, after the first was killed), and the store of the one
// retrying knows nothing of it (EarlierAttempt). Before 2026-12-07 such a retry, the record
// cleared meanwhile, was refused saying "the intent's record is unchanged", and so was the
// late result it left in the audit trail, of a commit that had been recorded
// (TestRetriedCommitAfterAClearSaysWhetherItLanded).
//
// A record still of t's claim (its token) that the retry could not commit is a claim the
// commit never made done: it was aborted, lost, or resolved. Otherwise the event that ended
// the claim tells, by the claim's token it carries since 2026-12-07 (a clear, a resolve, a
// takeover or a supersede) and the state the claim's record had then: done, the commit was
// recorded; in flight or unknown, it was not, and it cannot land since (its guard, or the
// intent's lock, finds the record changed); failed may be the commit's own stale refusal.
// No such event (a trail written before, or swept, or a restore): the ledger cannot tell.
func earlierCommit(tx Tx, rec *Record, t Ticket) (landed, maybe bool, err error) {
	if t.Token == 0 || t.Nonce == "" {
		return false, false, nil
	}
	if rec != nil && rec.Token == t.Token && (rec.Nonce == t.Nonce || rec.Nonce == "") {
		return false, false, nil
	}
	found := false
	err = tx.Events(t.Intent, func(ev Event) bool {
		switch ev.Kind {
		case EventClear, EventReclaim, EventSuperseded, EventResolveHappened, EventResolveDidNotHappen, EventResolveLeaveFenced:
			if ev.Token == t.Token {
				found, landed, maybe = true, ev.State == StateDone, ev.State == StateFailed
			}
		}
		return !found
	})
	if err != nil {
		return false, false, err
	}
	return landed, maybe || !found, nil
}

// Heartbeat extends the ticket's lease by the lease TTL from now and returns the new expiry.
// The claim is then held through this engine's process (Config.Owner): its life, not that of
// the process that made the claim, says whether the holder is alive. A claim this process
// already held keeps the carrier it named (Request.Carrier); one taken over from another
// process names none. On an error t is returned as given, still the claim's handle (its lease
// not extended): renew again, or report the outcome with it.
func (e *Engine) Heartbeat(ctx context.Context, t Ticket) (Ticket, error) {
	return e.heartbeat(ctx, t, nil)
}

// Carry is Heartbeat recording carrier as the claim's carrier (Request.Carrier; "" for none):
// for a holder whose call goes to other processes than it named at Prepare (its server
// restarted in between), before it sends the call there.
func (e *Engine) Carry(ctx context.Context, t Ticket, carrier string) (Ticket, error) {
	if !validCarrier(carrier) {
		return t, InvalidError{"carrier", "must be empty or made by GroupCarrier"}
	}
	return e.heartbeat(ctx, t, &carrier)
}

// heartbeat is Heartbeat and Carry. On an error it hands t back as given: a holder renewing
// in a loop (t, err = eng.Heartbeat(ctx, t)) keeps its claim's handle through a renewal the
// ledger did not take. Before 2026-12-07 it got the zero Ticket, and its Commit was refused
// lease_lost with the result recorded nowhere (TestHeartbeatThatFailsKeepsTheTicket).
func (e *Engine) heartbeat(ctx context.Context, t Ticket, carrier *string) (Ticket, error) {
	if err := e.claimless(ctx, t); err != nil {
		e.counts.add(bLeaseLost)
		return t, err
	}
	var next Ticket
	err := e.update(ctx, func(tx Tx) error {
		rec, err := tx.Get(t.Intent)
		if err != nil {
			return err
		}
		healing := heals(rec, t)
		if !healing {
			if err := holds(rec, t); err != nil {
				return err
			}
		}
		r := *rec
		r.State, r.Reason = StateInFlight, ""
		// The claim is now held through this process: the one whose life says whether its
		// holder is alive. Kept as it was, a holder that went on through another process
		// after the first died was judged gone at the next attempt, though it had just been
		// told to keep running: taken over if re-run safe (a second execution while the first
		// ran), else fenced as unknown, for an operator to clear under it.
		switch {
		case carrier != nil:
			r.Owner = e.ownerWith(*carrier)
		case !e.mine(rec.Owner):
			r.Owner = e.cfg.Owner
		}
		r.LeaseUntil = tx.Now().Add(e.cfg.LeaseTTL)
		r.UpdatedAt = tx.Now()
		if err := tx.Put(&r); err != nil {
			return err
		}
		if healing {
			// The holder is back: its claim runs again. Nobody else could have claimed the
			// intent meanwhile, since unknown refuses every attempt.
			why := "the claim's own heartbeat shows its holder is back; was unknown: " + rec.Reason
			if err := tx.AppendEvent(Event{At: tx.Now(), Intent: r.Intent, Kind: EventHeal, Who: rec.Agent, Reason: why, State: StateUnknown}); err != nil {
				return err
			}
		}
		next = Ticket{Intent: r.Intent, Token: r.Token, Nonce: r.Nonce, Domain: r.Domain, Seq: r.Seq, LeaseUntil: r.LeaseUntil, Reclaimed: t.Reclaimed, KeepHash: r.KeepResult == KeepHash}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			e.counts.add(bLeaseLost)
		}
		return t, err
	}
	return next, nil
}

// afterOutcome counts a lost lease and wakes waiters of the intent.
func (e *Engine) afterOutcome(intent string, err error) {
	if errors.Is(err, ErrLeaseLost) {
		e.counts.add(bLeaseLost)
		return
	}
	if err == nil || errors.Is(err, ErrStaleReadSet) {
		e.watch.wake(intent)
	}
}
