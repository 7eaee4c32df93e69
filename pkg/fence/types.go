package fence

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// ReadSetEntry is one piece of state a decision was based on: the domain's sequence number as
// the caller read it (see Engine.Current).
type ReadSetEntry struct {
	Domain string `json:"domain"`
	Seq    uint64 `json:"seq"`
}

// Request is one attempt to run a side effect.
type Request struct {
	// Intent is the stable id of the logical action ("charge:order-123"). Required: at most
	// MaxIntentLen bytes of UTF-8 without a NUL byte.
	Intent string `json:"intent"`
	// Parent is the hash of the cert this action causally follows (64 lowercase hex digits),
	// if any; anything else is refused, as `ledger verify` fails a cert whose parent is not one.
	Parent string `json:"parent,omitempty"`
	// Domain is the contention scope whose next sequence number the effect takes; empty for
	// an effect that contends with nothing but its own duplicates. At most MaxDomainLen bytes
	// of UTF-8 without a NUL byte, as is every read-set domain.
	Domain string `json:"domain,omitempty"`
	// Tool and Args identify the call; their canonical fingerprint must match on every attempt
	// of the intent. Args is any JSON value (empty means null).
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args,omitempty"`
	// EmptyArgsAlike makes absent or null Args and an empty object one call for the
	// fingerprint check (serve, whose agents send any of the three for a call without
	// arguments): an attempt in one form of an intent recorded in another is treated as an
	// identical attempt (replayed, refused in flight, waited for). Fingerprints are not
	// changed: the record and its cert keep the form the intent was recorded with, and a
	// claim this attempt makes over that record (a reclaim, a supersede) takes that form too.
	EmptyArgsAlike bool `json:"-"`
	// ReadSet lists the state the decision was based on; any entry that moved refuses the
	// attempt before it runs and fails it at commit.
	ReadSet []ReadSetEntry `json:"read_set,omitempty"`
	// Agent names who decides; its counter is ticked in the cert's clock.
	Agent string `json:"agent,omitempty"`
	// Clock is the vector clock the agent knew when it decided.
	Clock VectorClock `json:"vector_clock,omitempty"`
	// RerunSafe declares that running the effect a second time is harmless (the downstream
	// honours an idempotency key, say). It is recorded on the claim, and only such a claim is
	// taken over when its lease lapses or its holder dies; any other becomes unknown.
	RerunSafe bool `json:"rerun_safe,omitempty"`
	// Redact names argument fields whose values the ledger stores as Redacted (privacy.go);
	// the fingerprint still covers the full arguments.
	Redact []string `json:"redact,omitempty"`
	// KeepResult is what the ledger keeps of the result: KeepFull ("" too) or KeepHash.
	KeepResult KeepResult `json:"keep_result,omitempty"`
	// ExactArgs, if set, is kept in the record byte for byte: the arguments exactly as the
	// tool received them (Args is their canonical form, which merges spellings of one value).
	ExactArgs []byte `json:"-"`
	// ReplayWindow, when positive, bounds how long a done outcome answers this intent: an
	// attempt later than ReplayWindow after the commit is a new action. The engine then
	// supersedes the done record (it stays in the ledger, under SupersededIntent, until its
	// result TTL, and the change is audited) and claims the intent afresh. Zero: the done
	// outcome answers until its result TTL. For content-derived intents (wrap), where an
	// identical call much later is more likely a deliberate repeat than a retry.
	ReplayWindow time.Duration `json:"-"`
	// Carrier, when set, names the processes this process started to run the call (GroupCarrier:
	// the process group of wrap's MCP server). It is recorded with the claim's owner, and a
	// holder that is gone is judged alive while its carrier runs (carrier.go). Counted in this
	// process's PID namespace, so never read from a request another process sent.
	Carrier string `json:"-"`
}

// SupersededIntent is the key under which a done record stays once a later action of its
// intent superseded it (see Request.ReplayWindow): the intent, "~" and the first 16 hex digits
// of its cert's hash.
func SupersededIntent(intent, certHash string) string {
	if len(certHash) > 16 {
		certHash = certHash[:16]
	}
	return intent + "~" + certHash
}

// maxSupersededNames bounds the numbered names a superseded record may move to:
// SupersededIntent, then the same followed by "~2", "~3" … when a record already holds it
// (another intent of that name, or an earlier execution of the intent with the same cert).
// When all are held, the record moves to the same followed by "~" and 32 random hex digits
// (spareSupersededName).
const maxSupersededNames = 16

// spareSupersededName is the name a superseded record moves to when every numbered name of
// base is held: base, "~" and a fresh nonce (32 lowercase hex digits), a name no other record
// holds. An action repeated identically (same tool, arguments and result: one cert) more often
// than sixteen times within its result TTL, each time after its replay window (a coding
// agent's git pull, a status post every quarter hour), fills the numbered names; before
// 2026-12-06 the next repeat was refused until one of them expired, for up to the result TTL.
func spareSupersededName(base string) string { return base + "~" + newNonce() }

// isNonce reports whether s has the form of newNonce's: 32 lowercase hex digits.
func isNonce(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// supersededName is the i-th name (from 1) a record superseded under base may move to.
func supersededName(base string, i int) string {
	if i == 1 {
		return base
	}
	return base + "~" + strconv.Itoa(i)
}

// IsSupersededName reports whether key is a name under which a done record of intent, whose
// cert has certHash, may have been kept once superseded: SupersededIntent(intent, certHash),
// one of the numbered names after it, or the spare name of one with a nonce.
func IsSupersededName(key, intent, certHash string) bool {
	base := SupersededIntent(intent, certHash)
	if rest, ok := strings.CutPrefix(key, base+"~"); ok && isNonce(rest) {
		return true
	}
	for i := 1; i <= maxSupersededNames; i++ {
		if key == supersededName(base, i) {
			return true
		}
	}
	return false
}

// Ticket is the handle of an admitted attempt. Only Intent, Token and Nonce carry authority:
// the engine checks them against its own record and decides nothing from the other fields.
// One of them it reads: for a late commit of a claim no longer recorded (cleared, replaced),
// KeepHash alone says whether the audit trail keeps the reported result or only its digest,
// so a ticket whose KeepHash was cleared has such a result kept in full. Heartbeat carries
// Reclaimed over into the ticket it returns.
type Ticket struct {
	Intent     string    `json:"intent"`
	Token      uint64    `json:"token"`
	Nonce      string    `json:"nonce"`
	Domain     string    `json:"domain,omitempty"`
	Seq        uint64    `json:"seq,omitempty"`
	LeaseUntil time.Time `json:"lease_until"`
	Reclaimed  bool      `json:"reclaimed,omitempty"`
	// KeepHash marks the ticket of a claim that keeps only its result's digest (KeepHash):
	// should its commit come after the claim was cleared or replaced, the audit trail keeps
	// only the digest of what it reported (lateCommitWhat).
	KeepHash bool `json:"keep_hash,omitempty"`
}

// Admission is the answer to Prepare: exactly one of Ticket (run the effect now) and Cert (do
// not run it; the recorded result is in the cert) is set. The Cert is the caller's, but its
// Args, Result, ReadSet and Clock are shared with the ledger's record (a replay allocates
// only the cert): read them, never modify them in place.
type Admission struct {
	Ticket *Ticket
	Cert   *Cert
	// RecordedAt is when the replayed cert was committed (set with Cert).
	RecordedAt time.Time
	// ResultNotKept is set with Cert when the ledger kept only the result's digest
	// (KeepHash): the caller must not run the effect, and has no result to give back.
	ResultNotKept bool
}

// Fresh reports whether the caller must run the effect.
func (a Admission) Fresh() bool { return a.Ticket != nil }

// State is the recorded state of an intent.
type State string

const (
	StateNone     State = "none"      // no record: free to claim
	StateInFlight State = "in_flight" // claimed, lease running
	StateDone     State = "done"      // executed, cert recorded
	StateFailed   State = "failed"    // the holder reported failure with unknown outcome
	StateUnknown  State = "unknown"   // the holder vanished mid-call
)

// Fenced reports whether the state refuses new attempts until an operator clears it.
func (s State) Fenced() bool { return s == StateFailed || s == StateUnknown }

// Record is everything the ledger keeps about one intent. Stores persist it as given.
type Record struct {
	Intent      string          `json:"intent"`
	State       State           `json:"state"`
	Fingerprint string          `json:"fingerprint"`
	Token       uint64          `json:"token"`
	Nonce       string          `json:"nonce,omitempty"`
	Owner       string          `json:"owner,omitempty"` // process identity of the holder
	Agent       string          `json:"agent,omitempty"`
	Parent      string          `json:"parent,omitempty"`
	Domain      string          `json:"domain,omitempty"`
	Seq         uint64          `json:"seq,omitempty"`
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args"` // canonical
	// ExactArgs are the arguments byte for byte as the tool received them, when the caller
	// gave them (wrap does); base64 in JSON.
	ExactArgs  []byte         `json:"exact_args,omitempty"`
	ReadSet    []ReadSetEntry `json:"read_set,omitempty"`
	Clock      VectorClock    `json:"vector_clock,omitempty"` // ticked at admission
	ClaimedAt  time.Time      `json:"claimed_at"`
	LeaseUntil time.Time      `json:"lease_until"`
	UpdatedAt  time.Time      `json:"updated_at"`
	// ExpiresAt is when a done outcome stops being replayed and may be swept (zero: never).
	ExpiresAt time.Time `json:"expires_at,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Cert      *Cert     `json:"cert,omitempty"`
	// RerunSafe: the claim was made for an effect declared safe to run twice (the request's
	// RerunSafe, or on_lease_expiry=reclaim), so any process judging a lapsed lease or a dead
	// holder may take it over.
	RerunSafe bool `json:"rerun_safe,omitempty"`
	// KeepResult and Redacted are the privacy settings of the claim (privacy.go): Args holds
	// Redacted at each path in Redacted, and a KeepHash cert holds only its result's digest.
	KeepResult KeepResult `json:"keep_result,omitempty"`
	Redacted   []string   `json:"redacted,omitempty"`
}

// Healable reports whether the record is a claim that went unknown only because its lease
// lapsed or its holder looked dead: a late settle by that very claim (same token and nonce)
// is accepted (see Engine.Commit).
func (r *Record) Healable() bool { return r.State == StateUnknown && r.Nonce != "" }

// Event kinds recorded in the ledger's audit trail.
const (
	EventRelease = "release"
	// EventFailure is a release whose call ran and failed definitely (OutcomeFailure): the
	// intent is free, and a waiter in another process that waited on that claim is told.
	EventFailure = "failure"
	EventAbort   = "abort"
	EventLost    = "lost" // the holder lost track of the effect mid-call: now unknown
	EventClear   = "clear"
	EventOrphan  = "orphan"  // in flight when its process died: now unknown
	EventExpired = "expired" // the lease lapsed and re-running is not known to be safe: now unknown
	EventStale   = "stale_commit"
	EventReclaim = "reclaim" // a lapsed or orphaned re-run-safe claim was taken over
	EventHeal    = "heal"    // the claim that went unknown settled late: its outcome is recorded
	// EventLateResult: a settle by a claim that no longer holds the intent (cleared, replaced)
	// was refused; the event keeps what it reported, result included.
	EventLateResult = "late_result"
	// EventSuperseded: an attempt after the request's replay window made a done intent a new
	// action; the done record moved to SupersededIntent.
	EventSuperseded = "superseded"
)

// KeptForever reports whether audit events of this kind survive Sweep: operator clears and
// resolves, and refused late results (the only record of an outcome reported after its claim
// was cleared).
func KeptForever(kind string) bool {
	switch kind {
	case EventClear, EventLateResult, EventResolveHappened, EventResolveDidNotHappen, EventResolveLeaveFenced:
		return true
	}
	return false
}

// KeptForeverKinds lists the event kinds KeptForever keeps, for stores that sweep in a query.
func KeptForeverKinds() []string {
	return []string{EventClear, EventLateResult, EventResolveHappened, EventResolveDidNotHappen, EventResolveLeaveFenced}
}

// Event is one audit record: who did what to an intent, and why.
type Event struct {
	At     time.Time `json:"at"`
	Intent string    `json:"intent"`
	Kind   string    `json:"kind"`
	Who    string    `json:"who,omitempty"`
	Reason string    `json:"reason,omitempty"`
	// State is the intent's state before the event.
	State State `json:"state,omitempty"`
	// Token is the claim whose holder reported the event's outcome (release, abort, lost),
	// so that a retry of a release that landed, its answer lost, is recognised; of a clear, a
	// resolve, a takeover (reclaim) or a supersede, since 2026-12-07, the claim whose record
	// it ended or moved, so that a retried commit of that claim can tell whether it had been
	// recorded (earlierCommit). Every store keeps it (a SQLite ledger since its events table
	// got its token column; events written before, or by a build without it, read 0).
	Token uint64 `json:"token,omitempty"`
}

// ExpiryPolicy says what an expired lease means.
type ExpiryPolicy string

const (
	// Fence (the default): a claim whose lease lapsed, or whose holder died, becomes unknown,
	// fenced until cleared, unless its request was declared RerunSafe. A stall beats a double.
	Fence ExpiryPolicy = "fence"
	// Reclaim: every claim this engine makes is recorded re-run safe, so a lapsed or orphaned
	// one is taken over by the next attempt. Only for ledgers whose effects are all idempotent.
	Reclaim ExpiryPolicy = "reclaim"
)

// ParseExpiryPolicy accepts "fence" or "reclaim" ("" is the default, fence).
func ParseExpiryPolicy(s string) (ExpiryPolicy, error) {
	switch ExpiryPolicy(s) {
	case "", Fence:
		return Fence, nil
	case Reclaim:
		return Reclaim, nil
	}
	return "", InvalidError{"on_lease_expiry", fmt.Sprintf("%q: want fence or reclaim", s)}
}

// Config tunes an Engine. The zero value means the defaults.
type Config struct {
	LeaseTTL      time.Duration // default 60 s
	ResultTTL     time.Duration // default 24 h
	OnLeaseExpiry ExpiryPolicy  // default Fence
	// Owner identifies this process in the records it claims (default: LocalOwner()). It must
	// name this process alone: an engine whose Owner is the same string takes the claims for
	// its own, held by a live process whatever became of their holder (a killed holder's
	// claim then waits for its lease instead of being judged gone, and a ClearUnlessHeld of it
	// through that engine is refused). The judges of other processes read it with
	// Liveness: a string OwnerLiveness cannot read is judged by the lease alone.
	Owner string
	// Liveness judges the process named by an owner string (default: OwnerLiveness). One of
	// the caller's own is given the owner without the carrier a claim may name
	// (Request.Carrier), as its Config.Owner made it. It runs inside the engine's
	// transactions and must not panic: a panic rolls the transaction back, nothing of it
	// written (the contract suite's PanickedUpdateWritesNothing, every store); the SQLite
	// store, whose writer runs the transactions of several callers on one goroutine, then
	// returns it to its caller as an error so the others' go on, where another store may let
	// the panic through.
	Liveness func(owner string) Liveness
	// SpoolDir is a local directory where outcomes the ledger cannot take are kept until it
	// can (see Engine.Settle); "" keeps none. A relative one is read against the working
	// directory at New, once: a later chdir does not move it.
	SpoolDir string
	// SpoolShared: the spool may hold outcomes of other ledgers (a PostgreSQL spool named after
	// a URL, which another environment's PGOPTIONS or PGDATABASE points at another ledger).
	// A drain then records only an outcome of a claim this ledger holds (a record of the
	// ticket's intent with its token and nonce) and leaves the others for their own ledger,
	// which refused them as claims it never made, and the drain deleted them.
	SpoolShared bool
	// KeepEvents: Sweep drops expired outcomes only, never audit events. For an engine whose
	// ResultTTL is not the ledger's (an operator's look at it): events are dropped by the
	// sweeps of the processes that record its calls, after their ResultTTL.
	KeepEvents bool
}

// Defaults of SPEC §4.
const (
	DefaultLeaseTTL  = 60 * time.Second
	DefaultResultTTL = 24 * time.Hour
)

func (c Config) withDefaults() Config {
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.ResultTTL <= 0 {
		c.ResultTTL = DefaultResultTTL
	}
	if c.OnLeaseExpiry == "" {
		c.OnLeaseExpiry = Fence
	}
	if c.Owner == "" {
		c.Owner = LocalOwner()
	}
	// The owner string as every store keeps it (bytes that are not UTF-8 become U+FFFD): the
	// engine tells its own claims by it (mine). Compared as given, an owner that is not UTF-8
	// was not its own claims' once recorded, and a heartbeat replaced it, dropping the claim's
	// carrier (TestHolderWithAHostNameNotUTF8KeepsItsCarrier).
	c.Owner = ledgerText(c.Owner)
	if c.SpoolDir != "" && !filepath.IsAbs(c.SpoolDir) {
		// Read against the working directory of each use, a relative spool moved with the
		// process (a daemon's chdir after its open): outcomes went where no process of the
		// ledger looks, and the next one fenced (or re-ran) what they recorded
		// (TestSpoolOfARelativeLedgerSurvivesAChdir). It is the directory it named at New.
		if abs, err := filepath.Abs(c.SpoolDir); err == nil {
			c.SpoolDir = abs
		}
	}
	if c.Liveness == nil {
		c.Liveness = OwnerLiveness
	} else if reflect.ValueOf(c.Liveness).Pointer() != reflect.ValueOf(OwnerLiveness).Pointer() {
		c.Liveness = baseLiveness(c.Liveness)
	}
	return c
}

// baseLiveness gives a Liveness of the caller's own the owner strings its Config.Owner made,
// without the carrier a claim may add to them (carrier.go): it was written for those strings,
// and a carrier it does not know of must not make it misjudge a holder (a registry of live
// workers keyed by owner that answers Dead for a string it does not hold would have a live
// holder's claim taken over). It judges the holder alone, as before carriers.
func baseLiveness(judge func(string) Liveness) func(string) Liveness {
	return func(owner string) Liveness {
		base, _ := splitCarrier(owner)
		return judge(base)
	}
}
