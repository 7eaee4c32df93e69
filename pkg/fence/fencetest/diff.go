package fencetest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// DiffStore is one store Differential runs against: a name for its messages and either a
// factory of fresh, empty stores or, for a durable store, Durable, which opens one ledger
// again and again (a step may then restart every process: the store is closed and opened
// again, and its records are read back from the database).
type DiffStore struct {
	Name    string
	New     Factory
	Durable Reopener
}

// Environment of Differential.
const (
	// EnvDiffSeed runs the one sequence of this seed, logging every step (a failure prints
	// the seed to put here).
	EnvDiffSeed = "EFFECTFENCE_DIFF_SEED"
	// EnvDiffRuns is how many sequences to run (default 12).
	EnvDiffRuns = "EFFECTFENCE_DIFF_RUNS"
	// EnvDiffOps is how many operations each sequence has (default 80).
	EnvDiffOps = "EFFECTFENCE_DIFF_OPS"
	// EnvDiffBase is the first seed of the sequences (default 1); "random" picks one.
	EnvDiffBase = "EFFECTFENCE_DIFF_BASE"
)

// Differential drives random sequences of operations (prepare, bursts of identical prepares
// at once, commit, abort, release and lost, directly or through Settle, heartbeat, forged
// settles, clear, resolve, evict, sweep, recover, status, current, a restart of every process,
// the death of a process) through engines over each store, the same sequence for every store,
// and fails at
// the first step where two stores answer differently or where an answer breaks the reference
// model (a second fresh admission of a held, done or fenced intent, a replay that is not the
// committed cert, a domain number handed out twice or falling, a cert that does not verify).
//
// Each store gets three engines sharing it, as three processes would, with owners p0, p1 and
// p2 (p2's policy reclaims lapsed claims); a step may declare one of them dead or out of
// sight, which makes the others take over or fence its claims. Leases and result TTLs are an
// hour, except that a sequence may give a process leases or TTLs of one nanosecond, and a
// request a replay window of one nanosecond: each step is a transaction begun after the last
// one ended, so such a lease has lapsed, and such an outcome has expired, at the next step
// whichever clock a store reads, and the answers still do not depend on timing. Only what
// legitimately differs between stores is normalised: fencing tokens, which PostgreSQL takes
// from a sequence and may skip (docs/DECISIONS-postgres.md, "Fencing tokens"); nonces;
// instants; and the instants, durations and token numbers inside audit reasons. A read set
// or a cert's read set that is empty is the same as none (the stores' JSON writes both as
// one).
//
// A few steps make several calls at once, each on engines of its own (one per process, with
// the process's owner and settings and the host's spool directory) over the store behind a
// switch that can fail its transactions (an unreachable ledger; or the first write lands and
// its answer is lost). opWait: identical PrepareWait attempts of every process wait on a held
// claim until its holder commits (each is replayed the cert, counted coalesced), aborts or
// loses it (each is refused as the ledger says), or releases it (exactly one is admitted; it
// commits and the others replay its cert). opSpool: the holder settles while the ledger
// fails, so the outcome waits in the spool (or, the spool failing too, in the holder's
// engine's memory, which only that engine drains); the holder may die or its lease lapse;
// the ledger comes back; a
// duplicate of another process asks (and, refused as unknown, has DrainedFor record what
// waits and asks again), and a Recover drains the rest: the duplicate is never admitted while
// the outcome waits. Both stay deterministic (the holder settles once every waiter has been
// told the intent is in flight) and are checked against the model like any step. Two are not
// deterministic and check rules instead, on intents and domains of their own (the prefix
// timing:, left out of the comparisons, their records cleared): opRace, different intents
// racing for two domains (numbers handed out once each, in a row, never falling; an admitted
// claim that read its own domain got the number after the one it read; a commit refused as
// stale exactly when a domain it read moved since); and opLease, a holder on a lease of 40 or
// 80 ms heartbeating (or not) while duplicates and a waiter of every process ask (in flight,
// or unknown as a live holder's lapsed lease, never admitted, never another cert; each
// heartbeat's lease ends later and is the one recorded).
//
// Each sequence is a subtest named seed=N: rerun one with -run 'Name/seed=N$', or with
// EFFECTFENCE_DIFF_SEED=N to log its steps. EFFECTFENCE_DIFF_RUNS, _OPS and _BASE make a run
// longer.
func Differential(t *testing.T, stores []DiffStore) {
	runs, ops := envInt(t, EnvDiffRuns, 12), envInt(t, EnvDiffOps, 80)
	base := uint64(1)
	switch v := os.Getenv(EnvDiffBase); v {
	case "":
	case "random":
		base = rand.Uint64() >> 20
	default:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvDiffBase, v, err)
		}
		base = n
	}
	verbose := false
	if v := os.Getenv(EnvDiffSeed); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvDiffSeed, v, err)
		}
		base, runs, verbose = n, 1, true
	}
	tally := map[string]int{}
	defer func() {
		keys := make([]string, 0, len(tally))
		for k := range tally {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%d", k, tally[k])
		}
		t.Logf("%d sequences from seed %d, %d steps on each store; answers:%s", runs, base, tally["steps"], b.String())
	}()
	for i := 0; i < runs; i++ {
		seed := base + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			d := newDiffRun(t, seed, stores, verbose)
			d.tally = tally
			for step := 0; step < ops; step++ {
				if !d.step(step, d.next()) {
					t.Logf("replay: %s=%d (or -run '%s$'), %s=%d", EnvDiffSeed, seed, t.Name(), EnvDiffOps, ops)
					return
				}
			}
			d.final()
			if t.Failed() {
				t.Logf("replay: %s=%d (or -run '%s$'), %s=%d", EnvDiffSeed, seed, t.Name(), EnvDiffOps, ops)
			}
		})
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// The universe the sequences draw from: few names, so that attempts collide.
var (
	diffIntents = []string{"i0", "i1", "i2", "i3", "'; DROP TABLE effectfence_records; --", "\u2028x\u2029", "\U0001F600", "tab\tnl\n", "%_", strings.Repeat("L", fence.MaxIntentLen)}
	badIntents  = []string{"", "a\x00b", "\xff", strings.Repeat("L", fence.MaxIntentLen+1)}
	diffDomains = []string{"d0", "d1", "d2", `q"uote\`, "\uFFFD"}
	badDomains  = []string{"a\x00", "\xfe", strings.Repeat("D", fence.MaxDomainLen+1)}
	diffAgents  = []string{"", "a", "b", "é", "n\x00ul", "\u202e"}
	diffTools   = []string{"t", "u", "t\x00", "'; --"}
	// The first three are one value (one fingerprint) spelled three ways.
	diffArgs = []string{
		`{"a":1}`, `{"a":1.0}`, `{ "a" : 1 }`, `{"a":2}`, `{"card":{"number":"4242","cvc":"1"},"amount":5}`,
		`[1,"x\u0000y"]`, `null`, ``, `"\u2028"`, `{"b":[true,{"c":null}]}`, `100000000000000000000001`,
	}
	bigArgs    = []byte(`{"blob":"` + strings.Repeat("0123456789abcdef<>&\u2028", 2000) + `","a":1}`)
	badArgs    = []string{`{"a":1,"a":2}`, `{"a":`, `"\ud800"`, `[1e400]`}
	diffRedact = [][]string{nil, nil, nil, nil, {"card.number"}, {"*"}, {"a"}, {"b.*.c"}}
	diffKeep   = []fence.KeepResult{"", "", "", fence.KeepFull, fence.KeepHash}
)

// diffResults are the results commits report: a few hostile ones and two that are not JSON
// (small), and the deep and large hostile ones (big), drawn rarely.
func diffResults() (small, big [][]byte) {
	for _, h := range HostileResults() {
		switch {
		case len(h.Result) <= 4096:
			small = append(small, h.Result)
		case len(h.Result) <= 100<<10:
			big = append(big, h.Result)
		}
	}
	return append(small, []byte(`{`), []byte(`{"a":1} x`)), big
}

// result picks a result to commit or resolve with.
func (d *diffRun) result() []byte {
	if d.chance(0.03) {
		return d.big[d.pick(len(d.big))]
	}
	return d.results[d.pick(len(d.results))]
}

// diffWorld is one store with its engines and the tickets they were handed.
type diffWorld struct {
	name    string
	st      fence.Store
	engs    [3]*fence.Engine
	tickets []fence.Ticket // by ticket id, as the model numbers them
	lastTok uint64
	open    func() fence.Store // reopens a durable store; nil for the memory store
	cfgs    [3]fence.Config
	spool   string         // the spool directory of this world's host (every process's)
	timing  fence.Counters // what the timing-dependent steps counted (left out of the ledger's counters)
	// raceSeen is where opRace left its domains (they are this world's own).
	raceSeen map[string]uint64
}

// diffModel is the reference: what every store should hold.
type diffModel struct {
	recs    map[string]*mRec
	domains map[string]uint64
	floor   uint64
	seen    [3]fence.Liveness // how each process's owner is judged: Alive until it dies or goes out of sight
	short   [3]bool           // the process's leases lapse at once (LeaseTTL 1 ns)
	brief   [3]bool           // the process's outcomes expire at once (ResultTTL 1 ns)
	tickets []mTicket
	counts  [3]fence.Counters // since each process started
	before  fence.Counters    // the ledger's counts from processes before the last restart
	events  []mEvent
	certs   []string // hashes of recorded certs, for parents
	issued  map[string]map[uint64]bool
	current map[string]uint64 // the highest Current each domain answered
	extra   fence.Counters    // what the engines of one step (opWait, opSpool) counted; in the ledger, no process's
	serial  int               // numbers the intents and domains of the timing-dependent steps
	// unread is why the spool of a step's engines cannot be read (opSpool's held outcome:
	// its path runs through a file), "" when it can: the judge then fences a re-run-safe
	// claim it would take over, as its outcome may wait there.
	unread string
}

type mRec struct {
	state     fence.State
	fp        string
	ticket    int // the claim's ticket id (-1: none)
	nonce     bool
	owner     int
	agent     string
	rerunSafe bool
	domain    string
	seq       uint64
	readSet   []fence.ReadSetEntry
	keepHash  bool
	cert      *fence.Cert
	reason    string
	lapsed    bool // the lease has lapsed (given by a process whose leases last 1 ns)
	expired   bool // a done outcome that has expired (recorded by a process whose TTL is 1 ns)
	spooled   bool // an outcome of the claim waits in the host's spool (opSpool)
}

// live reports whether the record answers as recorded: not an expired outcome.
func (r *mRec) live() bool { return r != nil && !r.expired }

type mTicket struct {
	intent string
}

type diffRun struct {
	t       *testing.T
	rng     *rand.Rand
	worlds  []*diffWorld
	m       *diffModel
	verbose bool
	results [][]byte
	big     [][]byte
	probe   *fence.Engine
	mu      sync.Mutex // guards m.seen against engines asking Liveness
	tally   map[string]int
	quiet   bool // the model predicts an answer nobody sees (a drain's): want checks nothing
	retry   bool // the model predicts a retry of a report (a drain's), which recognises its landed report
}

var owners = [3]string{"diff-p0", "diff-p1", "diff-p2"}

func newDiffRun(t *testing.T, seed uint64, stores []DiffStore, verbose bool) *diffRun {
	d := &diffRun{
		t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), verbose: verbose,
		probe: fence.New(fence.NewMemoryStore(), fence.Config{}),
		m: &diffModel{recs: map[string]*mRec{}, domains: map[string]uint64{}, issued: map[string]map[uint64]bool{},
			current: map[string]uint64{}},
	}
	d.results, d.big = diffResults()
	live := func(owner string) fence.Liveness {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i, o := range owners {
			if o == owner {
				return d.m.seen[i]
			}
		}
		return fence.CannotTell
	}
	// Some sequences give a process leases or result TTLs of a nanosecond: every later step
	// finds them lapsed or expired, whichever store's clock it reads (each step is a
	// transaction of its own, begun after the last one ended), so the answers stay the same
	// on every store while the lease and expiry rules run.
	for i := range d.m.seen {
		d.m.seen[i] = fence.Alive
		d.m.short[i] = d.chance(0.2)
		d.m.brief[i] = d.chance(0.15)
	}
	for _, s := range stores {
		w := &diffWorld{name: s.Name, spool: t.TempDir(), raceSeen: map[string]uint64{}}
		if s.Durable != nil {
			w.open = s.Durable(t)
			w.st = w.open()
		} else {
			w.st = s.New(t)
		}
		for i := range w.engs {
			cfg := fence.Config{LeaseTTL: time.Hour, ResultTTL: time.Hour, Owner: owners[i], Liveness: live}
			if d.m.short[i] {
				cfg.LeaseTTL = time.Nanosecond
			}
			if d.m.brief[i] {
				cfg.ResultTTL = time.Nanosecond
			}
			if i == 2 {
				cfg.OnLeaseExpiry = fence.Reclaim
			}
			w.cfgs[i] = cfg
			w.engs[i] = fence.New(w.st, cfg)
		}
		d.worlds = append(d.worlds, w)
	}
	return d
}

func (d *diffRun) pick(n int) int        { return d.rng.IntN(n) }
func (d *diffRun) chance(p float64) bool { return d.rng.Float64() < p }

func (d *diffRun) intent() string {
	if d.chance(0.015) {
		return badIntents[d.pick(len(badIntents))]
	}
	// The first four most of the time, so that attempts collide.
	if d.chance(0.75) {
		return diffIntents[d.pick(4)]
	}
	return diffIntents[d.pick(len(diffIntents))]
}

func (d *diffRun) domain() string {
	if d.chance(0.01) {
		return badDomains[d.pick(len(badDomains))]
	}
	return diffDomains[d.pick(len(diffDomains))]
}

// cur is the model's reading of a domain.
func (m *diffModel) cur(domain string) uint64 {
	if s, ok := m.domains[domain]; ok {
		return s
	}
	return m.floor
}

func (d *diffRun) request() fence.Request {
	r := fence.Request{Intent: d.intent(), Tool: diffTools[d.pick(len(diffTools))]}
	r.Args = []byte(diffArgs[d.pick(len(diffArgs))])
	if d.chance(0.75) { // the common call, so that duplicates replay
		r.Tool, r.Args = "t", []byte(diffArgs[d.pick(3)])
	}
	if d.chance(0.02) {
		r.Args = []byte(badArgs[d.pick(len(badArgs))])
	}
	if d.chance(0.02) {
		r.Args = bigArgs // a record larger than the stores' caches of small ones
	}
	if len(r.Args) == 0 {
		r.Args = nil
	}
	if d.chance(0.6) {
		r.Domain = d.domain()
	}
	for n := d.pick(3); n > 0; n-- {
		dom := d.domain()
		seq := d.m.cur(dom)
		switch {
		case d.chance(0.1):
			seq++
		case d.chance(0.1) && seq > 0:
			seq--
		}
		if d.chance(0.01) {
			dom = ""
		}
		r.ReadSet = append(r.ReadSet, fence.ReadSetEntry{Domain: dom, Seq: seq})
	}
	if d.chance(0.5) && r.Domain != "" && !hasDomain(r.ReadSet, r.Domain) && d.chance(0.5) {
		r.ReadSet = append(r.ReadSet, fence.ReadSetEntry{Domain: r.Domain, Seq: d.m.cur(r.Domain)})
	}
	if d.chance(0.1) {
		r.ReadSet = []fence.ReadSetEntry{} // empty, not nil
	}
	r.Agent = diffAgents[d.pick(len(diffAgents))]
	if d.chance(0.01) {
		r.Agent = "\xff"
	}
	if d.chance(0.4) {
		r.Clock = fence.VectorClock{}
		for _, a := range diffAgents[1:] {
			if d.chance(0.5) {
				r.Clock[a] = uint64(d.pick(4))
			}
		}
		if d.chance(0.05) {
			r.Clock["z"] = math.MaxUint64
		}
		if d.chance(0.03) {
			r.Clock["\x00"] = 1
		}
		if d.chance(0.02) {
			r.Clock[r.Agent] = math.MaxUint64 // invalid when it is the agent's own
		}
	}
	switch {
	case d.chance(0.1) && len(d.m.certs) > 0:
		r.Parent = d.m.certs[d.pick(len(d.m.certs))]
	case d.chance(0.05):
		r.Parent = "\u2028parent\"'"
	case d.chance(0.02):
		r.Parent = "p\x00"
	}
	r.RerunSafe = d.chance(0.3)
	r.Redact = diffRedact[d.pick(len(diffRedact))]
	r.KeepResult = diffKeep[d.pick(len(diffKeep))]
	if d.chance(0.01) {
		r.Redact = []string{"a..b"}
	}
	if d.chance(0.01) {
		r.KeepResult = "bogus"
	}
	if d.chance(0.2) && len(r.Args) > 0 {
		r.ExactArgs = append([]byte(nil), r.Args...)
	}
	switch {
	case d.chance(0.15):
		r.ReplayWindow = time.Hour // never reached within a sequence
	case d.chance(0.15):
		r.ReplayWindow = time.Nanosecond // always passed at the next step
	}
	return r
}

func hasDomain(rs []fence.ReadSetEntry, d string) bool {
	for _, r := range rs {
		if r.Domain == d {
			return true
		}
	}
	return false
}

// diffOp is one step: what it does, for the log, and how it runs on one world.
type diffOp struct {
	what string
	run  func(w *diffWorld) answer
	// expect checks the reference answer against the model and updates the model.
	expect func(a answer)
}

// answer is one store's answer to a step, with what legitimately differs between stores
// left out.
type answer struct {
	Code   string // fence.CodeOf, or "not_found" for fence.ErrNotFound
	Err    string // the error's fields that must agree
	Kind   string // fresh, reclaimed, replayed
	Cert   *fence.Cert
	NoKept bool
	Ticket string // the ticket's fields that must agree
	Status string
	N      int
	Seq    uint64
	Rest   []string // the other attempts of a burst, or the waiters of opWait
	Sub    []answer // the later calls of a step of several (opWait, opSpool)
	Extra  string   // what else a step of several reports (its engines' counters)
}

var (
	reInstant = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	reClaim   = regexp.MustCompile(`claim \d+`)
	reTicket  = regexp.MustCompile(`ticket \d+`)
	reCame    = regexp.MustCompile(`came \S+ after`)
)

// normText removes from a message what differs between stores: instants and durations (each
// store's clock) and fencing token numbers (PostgreSQL's come from a sequence that may skip numbers,
// docs/DECISIONS-postgres.md "Fencing tokens").
func normText(s string) string {
	s = reInstant.ReplaceAllString(s, "<instant>")
	s = reClaim.ReplaceAllString(s, "claim <token>")
	s = reCame.ReplaceAllString(s, "came <duration> after")
	return reTicket.ReplaceAllString(s, "ticket <token>")
}

// spoolNamed is a with its world's spool directory, which a message may name (a spool that
// cannot be read), written <spool>: each world has its own (seed 15780980136883).
func spoolNamed(a answer, dir string) answer {
	if dir == "" {
		return a
	}
	name := func(s string) string { return strings.ReplaceAll(s, dir, "<spool>") }
	a.Err, a.Status, a.Extra = name(a.Err), name(a.Status), name(a.Extra)
	if a.Rest != nil {
		rest := make([]string, len(a.Rest))
		for i, r := range a.Rest {
			rest[i] = name(r)
		}
		a.Rest = rest
	}
	if a.Sub != nil {
		sub := make([]answer, len(a.Sub))
		for i, x := range a.Sub {
			sub[i] = spoolNamed(x, dir)
		}
		a.Sub = sub
	}
	return a
}

func errAnswer(err error) answer {
	if err == nil {
		return answer{}
	}
	a := answer{Code: fence.CodeOf(err)}
	if a.Code == fence.CodeStore && isNotFound(err) {
		a.Code = "not_found"
	}
	switch e := err.(type) {
	case fence.InFlightError:
		a.Err = fmt.Sprintf("intent=%q holder=%q", e.Intent, e.Holder)
	case fence.PriorFailureError:
		a.Err = fmt.Sprintf("intent=%q state=%s reason=%q healable=%v", e.Intent, e.State, normText(e.Reason), e.Healable)
	case fence.IntentConflictError:
		a.Err = fmt.Sprintf("intent=%q recorded=%s presented=%s", e.Intent, e.Recorded, e.Presented)
	case fence.StaleReadSetError:
		a.Err = fmt.Sprintf("intent=%q domain=%q expected=%d actual=%d executed=%v", e.Intent, e.Domain, e.Expected, e.Actual, e.Executed)
	case fence.DomainRaceError:
		a.Err = fmt.Sprintf("intent=%q domain=%q expected=%d actual=%d", e.Intent, e.Domain, e.Expected, e.Actual)
	case fence.LeaseLostError:
		a.Err = fmt.Sprintf("intent=%q why=%q", e.Intent, normText(e.Why))
	case fence.InvalidError:
		a.Err = fmt.Sprintf("field=%q why=%q", e.Field, e.Why)
	case fence.NotFencedError:
		a.Err = fmt.Sprintf("intent=%q state=%s why=%q", e.Intent, e.State, normText(e.Why))
	default:
		if a.Code == fence.CodeStore {
			a.Err = err.Error() // shown when stores disagree; a store error is never expected
		}
	}
	return a
}

func isNotFound(err error) bool {
	for e := err; e != nil; {
		if e == fence.ErrNotFound {
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

func certCopy(c *fence.Cert) *fence.Cert {
	if c == nil {
		return nil
	}
	out := *c
	out.Args = append([]byte(nil), c.Args...)
	out.Result = append([]byte(nil), c.Result...)
	if len(c.ReadSet) == 0 {
		out.ReadSet = nil // empty and nil are the same read set
	}
	return &out
}

// recText is a record with what differs between stores left out: token and nonce (their
// presence stays), owner-independent instants (their presence stays).
func recText(r fence.Record) string {
	has := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return "set"
	}
	c := certCopy(r.Cert)
	var cert string
	if c != nil {
		cert = fmt.Sprintf("%+v", *c)
	}
	rs := r.ReadSet
	if len(rs) == 0 {
		rs = nil
	}
	clk := r.Clock.Normal()
	return fmt.Sprintf("intent=%q state=%s fp=%s token=%v nonce=%v owner=%q agent=%q parent=%q domain=%q seq=%d tool=%q args=%q exact=%q readset=%v clock=%s claimed=%s lease=%s updated=%s expires=%s reason=%q rerun=%v keep=%q redacted=%q cert={%s}",
		r.Intent, r.State, r.Fingerprint, r.Token != 0, r.Nonce != "", r.Owner, r.Agent, r.Parent, r.Domain, r.Seq, r.Tool,
		r.Args, r.ExactArgs, rs, clk.Canonical(), has(r.ClaimedAt), has(r.LeaseUntil), has(r.UpdatedAt), has(r.ExpiresAt),
		normText(r.Reason), r.RerunSafe, r.KeepResult, r.Redacted, cert)
}

func ticketText(t fence.Ticket) string {
	return fmt.Sprintf("intent=%q domain=%q seq=%d reclaimed=%v keephash=%v token=%v nonce=%v", t.Intent, t.Domain, t.Seq, t.Reclaimed, t.KeepHash, t.Token != 0, t.Nonce != "")
}

var bg = context.Background()

// step runs one random operation on every world and compares; false stops the sequence.
func (d *diffRun) step(i int, op diffOp) bool {
	if d.verbose {
		d.t.Logf("step %d: %s", i, op.what)
	}
	answers := make([]answer, len(d.worlds))
	failed := d.t.Failed()
	for k, w := range d.worlds {
		answers[k] = spoolNamed(op.run(w), w.spool)
	}
	if !failed && d.t.Failed() { // a step that checks its own rules (opRace, opLease) said why
		d.t.Errorf("step %d: %s: broke the rules (above)", i, op.what)
		return false
	}
	for k := 1; k < len(answers); k++ {
		if !reflect.DeepEqual(answers[0], answers[k]) {
			d.t.Errorf("step %d: %s: stores disagree:\n%s: %s\n%s: %s", i, op.what, d.worlds[0].name, show(answers[0]), d.worlds[k].name, show(answers[k]))
			return false
		}
	}
	if d.verbose {
		d.t.Logf("  -> %s", show(answers[0]))
	}
	if answers[0].Code == fence.CodeStore {
		d.t.Errorf("step %d: %s: every store failed: %s", i, op.what, answers[0].Err)
		return false
	}
	d.tally["steps"]++
	verb := strings.TrimSuffix(strings.Fields(op.what)[0], ":")
	if len(verb) == 2 && verb[0] == 'p' { // "p1 commit …": the operation
		verb = strings.TrimSuffix(strings.Fields(op.what)[1], ":")
	}
	if strings.HasSuffix(op.what, " at once") {
		verb = "burst"
	}
	kind, _, _ := strings.Cut(answers[0].Kind, " ")
	d.tally[verb+":"+answers[0].Code+kind]++
	before := d.t.Failed()
	op.expect(answers[0])
	if !before && d.t.Failed() {
		d.t.Errorf("step %d: %s: the model disagrees (above); the stores answered %s", i, op.what, show(answers[0]))
		return false
	}
	return true
}

func show(a answer) string {
	s := fmt.Sprintf("%+v", a)
	if a.Cert != nil {
		s += fmt.Sprintf(" cert=%+v", *a.Cert)
	}
	return s
}

func (d *diffRun) failf(format string, args ...any) {
	d.t.Helper()
	d.t.Errorf(format, args...)
}
