// Package fencetest is the contract every fence.Store must pass. Each store's tests call
//
//	fencetest.Run(t, func(t *testing.T) fence.Store { ... a fresh, empty store ... })
//
// and a durable store also calls RunDurable. The suite drives the real engine with real
// goroutines and real (short) sleeps for lease and TTL expiry, so it checks what users rely
// on: exactly one execution per intent, replays identical to the original, fencing tokens,
// read sets, domain sequences, operator actions and counters.
package fencetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// Factory returns a fresh, empty store; it registers its own cleanup with t.
type Factory func(t *testing.T) fence.Store

// Reopener returns a function that opens the same durable ledger each time it is called.
type Reopener func(t *testing.T) func() fence.Store

var ctx = context.Background()

// Run runs every contract test against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"FreshCommitReplay", testFreshCommitReplay},
		{"RawJSONKeptByteForByte", testRawJSON},
		{"HostileResultsKeptByteForByte", testHostileResults},
		{"DeepArgsRefusedOrKept", testDeepArgs},
		{"ConcurrentDuplicatesAdmitOne", testConcurrentDuplicates},
		{"SameInstantDomainRace", testSameInstantDomainRace},
		{"DistinctIntentsGaplessSequence", testGaplessSequence},
		{"LeaseExpiryRerunSafeReclaimAndLeaseLost", testLeaseExpiryReclaim},
		{"LeaseExpiryReclaimPolicy", testLeaseExpiryReclaimPolicy},
		{"LeaseExpiryFencesByDefault", testLeaseExpiryFence},
		{"LiveHolderNeverTakenOver", testLiveHolderNeverTakenOver},
		{"LateSettleHeals", testLateSettleHeals},
		{"LateResultAfterClearRefusedAndAudited", testLateAfterClear},
		{"RecoverBoundsInFlight", testRecoverBoundsInFlight},
		{"SettleRetriesAndSpools", testSettleSpool},
		{"RetriedReleaseThatLandedBeforeAnotherClaim", testRetriedReleaseLanded},
		{"HeartbeatKeepsLease", testHeartbeat},
		{"AbortFencesUntilClear", testAbortFences},
		{"ReleaseFrees", testReleaseFrees},
		{"StaleCommitFails", testStaleCommit},
		{"StaleReadSetAtPrepare", testStaleAtPrepare},
		{"Conflict", testConflict},
		{"EmptyArgsAlike", testEmptyArgsAlike},
		{"FailureSharedWithAWaiterOfAnotherProcess", testFailureSharedAcrossProcesses},
		{"FailureSharedWithAWaiterThatNeverSawTheFailedClaim", testFailureSharedUnseen},
		{"WaiterThatCannotReadTheAuditTrailDoesNotRun", testFailureUnreadable},
		{"RetryAfterASharedFailureRuns", testRetryAfterSharedFailure},
		{"FailureSharedWithAWaiterThatAsksAgain", testFailureSharedAfterAskingAgain},
		{"SupersedeNeverOverwrites", testSupersedeNeverOverwrites},
		{"RefusedLateAttemptMovesNothing", testRefusedLateAttemptMovesNothing},
		{"SupersedeRepeatedPastTheNames", testSupersedeRepeatedPastTheNames},
		{"SweepDropsExpired", testSweep},
		{"SweepDropsOnlyExpiredOutcomes", testSweepBacklog},
		{"ScanByExpiryOldestFirst", testScanByExpiry},
		{"EvictDomainKeepsFloor", testEvictDomain},
		{"EvictDomainFloorNeverFalls", testEvictDomainFloorNeverFalls},
		{"EvictDomainRacingClaims", testEvictDomainRacingClaims},
		{"QueriesCreateNoState", testQueriesNoState},
		{"GatesInOrder", testGatesInOrder},
		{"LongestDurations", testLongestDurations},
		{"CallerSlicesNotKept", testCallerSlicesNotKept},
		{"IntentOrderIsByteOrder", testIntentByteOrder},
		{"ForgedTicketsChangeNothing", testForgedTickets},
		{"DeadOwnerIsUnknown", testDeadOwner},
		{"CoalescingWaiters", testCoalescing},
		{"CountersOneBucketEach", testCounters},
		{"InvalidRequests", testInvalid},
		{"ParentAndCertVerify", testParentAndVerify},
		{"FailedUpdateWritesNothing", testRollback},
		{"PanickedUpdateWritesNothing", testPanicRollback},
		{"GoexitUpdateWritesNothingStoreGoesOn", testGoexitUpdate},
		{"ResolveHappened", testResolveHappened},
		{"ResolveHappenedPrivacy", testResolveHappenedPrivacy},
		{"ResolveDidNotHappen", testResolveDidNotHappen},
		{"ResolveLeaveFenced", testResolveLeaveFenced},
		{"ResolveRefusals", testResolveRefusals},
		{"ResolveOrphan", testResolveOrphan},
		{"ResolveHappenedExpiresFromTheAnswer", testResolveHappenedExpiresFromTheAnswer},
		{"HostileNamesKeptOrRefusedAlike", testHostileNames},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore) })
	}
}

func req(intent string) fence.Request {
	return fence.Request{Intent: intent, Tool: "charge_card", Args: []byte(`{"amount":4900}`), Agent: "agent-a"}
}

func mustFresh(t *testing.T, eng *fence.Engine, r fence.Request) fence.Ticket {
	t.Helper()
	adm, err := eng.Prepare(ctx, r)
	if err != nil {
		t.Fatalf("prepare %s: %v", r.Intent, err)
	}
	if adm.Ticket == nil {
		t.Fatalf("prepare %s: replayed, want fresh", r.Intent)
	}
	return *adm.Ticket
}

func mustCommit(t *testing.T, eng *fence.Engine, tk fence.Ticket, result string) *fence.Cert {
	t.Helper()
	c, err := eng.Commit(ctx, tk, []byte(result))
	if err != nil {
		t.Fatalf("commit %s: %v", tk.Intent, err)
	}
	return c
}

func wantCode(t *testing.T, err error, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("err = %v, want %v", err, sentinel)
	}
}

func testFreshCommitReplay(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("charge:order-1")
	r.Domain = "order:1"
	r.Clock = fence.VectorClock{"agent-b": 2}
	tk := mustFresh(t, eng, r)
	if tk.Seq != 1 || tk.Domain != "order:1" || tk.Token == 0 || tk.Nonce == "" {
		t.Fatalf("ticket = %+v", tk)
	}
	cert := mustCommit(t, eng, tk, `{"charge":"ch_1","ok":true}`)
	if err := cert.Verify(); err != nil {
		t.Fatal(err)
	}
	if cert.Seq != 1 || cert.Domain != "order:1" || string(cert.Result) != `{"charge":"ch_1","ok":true}` {
		t.Fatalf("cert = %+v", cert)
	}
	if want := (fence.VectorClock{"agent-a": 1, "agent-b": 2}); !cert.Clock.Equal(want) {
		t.Fatalf("cert clock = %v, want %v", cert.Clock, want)
	}
	// A duplicate spelled differently is the same call and replays the identical cert.
	dup := r
	dup.Args = []byte(` { "amount" : 4.9e3 } `)
	adm, err := eng.Prepare(ctx, dup)
	if err != nil {
		t.Fatal(err)
	}
	if adm.Fresh() || adm.Cert.Hash != cert.Hash || string(adm.Cert.Result) != string(cert.Result) {
		t.Fatalf("duplicate: %+v", adm)
	}
	// The holder retrying its commit (its first answer was lost) gets the recorded cert; the
	// ticket cannot do anything else any more.
	again, err := eng.Commit(ctx, tk, []byte(`{"charge":"ch_2"}`))
	if err != nil || again.Hash != cert.Hash {
		t.Fatalf("retried commit: %+v %v; want the recorded cert", again, err)
	}
	wantCode(t, eng.Release(ctx, tk, "late"), fence.ErrLeaseLost)
	wantCode(t, eng.Abort(ctx, tk, "late"), fence.ErrLeaseLost)
	st, err := eng.Status(ctx, r.Intent)
	if err != nil || st.State != fence.StateDone || st.Cert.Hash != cert.Hash {
		t.Fatalf("status = %+v, %v", st, err)
	}
	if cur, _ := eng.Current(ctx, "order:1"); cur != 1 {
		t.Fatalf("current = %d, want 1", cur)
	}
}

// rawArgs and rawResult hold what encoding/json rewrites inside raw values: <, > and & (as
// \u003c...) and U+2028/U+2029; the result also has spaces that compacting would drop.
const (
	rawArgs   = "{\"note\":\"a<b>&c\u2028d\u2029e\"}"
	rawResult = "{ \"html\": \"<p>fish & chips</p>\", \"sep\": \"\u2028\" }"
)

// testRawJSON: a store gives back the raw JSON it was given (canonical args, a cert's args and
// result) byte for byte, so a cert committed on it verifies and hashes as on any other store,
// and a replay returns the tool's exact bytes.
func testRawJSON(t *testing.T, newStore Factory) {
	r := fence.Request{Intent: "raw:1", Tool: "post_note", Args: []byte(rawArgs), Agent: "agent-a"}
	eng := fence.New(newStore(t), fence.Config{})
	cert := mustCommit(t, eng, mustFresh(t, eng, r), rawResult)
	ref := fence.New(fence.NewMemoryStore(), fence.Config{})
	want := mustCommit(t, ref, mustFresh(t, ref, r), rawResult)
	if string(want.Args) != rawArgs {
		t.Fatalf("reference cert args = %s, want the canonical %s", want.Args, rawArgs)
	}
	check := func(what string, c *fence.Cert) {
		t.Helper()
		if err := c.Verify(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if h, err := c.ComputeHash(); err != nil || h != c.Hash {
			t.Fatalf("%s: hash %s, its canonical body hashes to %s (%v)", what, c.Hash, h, err)
		}
		if c.Hash != want.Hash || string(c.Args) != rawArgs || string(c.Result) != rawResult {
			t.Fatalf("%s: hash %s args %s result %s; want %s %s %s", what, c.Hash, c.Args, c.Result, want.Hash, rawArgs, rawResult)
		}
	}
	check("committed cert", cert)
	adm, err := eng.Prepare(ctx, r)
	if err != nil || adm.Fresh() {
		t.Fatalf("replay: %+v %v", adm, err)
	}
	check("replayed cert", adm.Cert)
	rec, err := eng.Status(ctx, r.Intent)
	if err != nil || rec.Cert == nil {
		t.Fatalf("status: %+v %v", rec, err)
	}
	if string(rec.Args) != rawArgs {
		t.Fatalf("recorded args = %s, want %s", rec.Args, rawArgs)
	}
	check("recorded cert", rec.Cert)
}

func testConcurrentDuplicates(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	const n = 16
	var (
		executions atomic.Int64
		wg         sync.WaitGroup
		start      = make(chan struct{})
		mu         sync.Mutex
		hashes     = map[string]int{}
		refused    int
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			adm, err := eng.Prepare(ctx, req("charge:dup"))
			if err != nil {
				if !errors.Is(err, fence.ErrInFlight) {
					t.Errorf("unexpected refusal: %v", err)
				}
				mu.Lock()
				refused++
				mu.Unlock()
				return
			}
			if adm.Fresh() {
				executions.Add(1)
				c, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_once"}`))
				if err != nil {
					t.Errorf("commit: %v", err)
					return
				}
				mu.Lock()
				hashes[c.Hash]++
				mu.Unlock()
				return
			}
			mu.Lock()
			hashes[adm.Cert.Hash]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if executions.Load() != 1 {
		t.Fatalf("executions = %d, want exactly 1", executions.Load())
	}
	if len(hashes) != 1 {
		t.Fatalf("distinct cert hashes = %v, want 1", hashes)
	}
	var first string
	for h := range hashes {
		first = h
	}
	for i := 0; i < 8; i++ { // late duplicates
		adm, err := eng.Prepare(ctx, req("charge:dup"))
		if err != nil || adm.Fresh() || adm.Cert.Hash != first {
			t.Fatalf("late duplicate %d: %+v %v", i, adm, err)
		}
	}
}

func testSameInstantDomainRace(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	trials := 100
	if testing.Short() {
		trials = 20
	}
	const racers = 4
	races := 0
	for trial := 0; trial < trials; trial++ {
		domain := fmt.Sprintf("deploy:%d", trial)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			winners atomic.Int64
		)
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				r := fence.Request{
					Intent: fmt.Sprintf("scale:%d:%d", trial, i), Tool: "scale", Args: []byte(fmt.Sprintf(`{"replicas":%d}`, i)),
					Domain: domain, ReadSet: []fence.ReadSetEntry{{Domain: domain, Seq: 0}}, Agent: fmt.Sprintf("a%d", i),
				}
				<-start
				adm, err := eng.Prepare(ctx, r)
				switch {
				case err == nil && adm.Fresh():
					winners.Add(1)
					if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`"scaled"`)); err != nil {
						t.Errorf("winner commit: %v", err)
					}
				case errors.Is(err, fence.ErrDomainRace), errors.Is(err, fence.ErrStaleReadSet):
					var race fence.DomainRaceError
					var stale fence.StaleReadSetError
					if !errors.As(err, &race) && !errors.As(err, &stale) {
						t.Errorf("refusal without facts: %v", err)
					}
				default:
					t.Errorf("racer %d: %+v %v", i, adm, err)
				}
			}(i)
		}
		close(start)
		wg.Wait()
		if w := winners.Load(); w != 1 {
			t.Fatalf("trial %d: %d winners, want exactly 1", trial, w)
		}
		if cur, _ := eng.Current(ctx, domain); cur != 1 {
			t.Fatalf("trial %d: domain at %d, want 1", trial, cur)
		}
	}
	st, _ := eng.Stats(ctx)
	races = int(st.SinceBoot.Race + st.SinceBoot.Stale)
	if races != trials*(racers-1) {
		t.Fatalf("refusals counted = %d, want %d", races, trials*(racers-1))
	}
}

func testGaplessSequence(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	const n = 32
	seqs := make([]uint64, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			r := fence.Request{Intent: fmt.Sprintf("ticket:%d", i), Tool: "open", Args: []byte(fmt.Sprintf(`{"n":%d}`, i)), Domain: "queue"}
			adm, err := eng.Prepare(ctx, r)
			if err != nil || !adm.Fresh() {
				t.Errorf("distinct intent %d refused: %v", i, err)
				return
			}
			c, err := eng.Commit(ctx, *adm.Ticket, []byte(`null`))
			if err != nil {
				t.Errorf("commit %d: %v", i, err)
				return
			}
			seqs[i] = c.Seq
		}(i)
	}
	close(start)
	wg.Wait()
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("sequence not gapless and unique: %v", seqs)
		}
	}
}

func testLeaseExpiryReclaim(t *testing.T, newStore Factory) {
	// The holder cannot be seen (another host, say) and the call is declared safe to re-run:
	// its lapsed claim is taken over.
	const lease = 700 * time.Millisecond // long enough for the in-flight check under load
	eng := fence.New(newStore(t), fence.Config{LeaseTTL: lease, Liveness: cannotTell})
	r := req("payout:7")
	r.RerunSafe = true
	old := mustFresh(t, eng, r)
	if _, err := eng.Prepare(ctx, r); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("live lease: err = %v, want in flight", err)
	}
	time.Sleep(lease + 100*time.Millisecond)
	other := fence.New(eng.Store(), fence.Config{LeaseTTL: lease, Owner: "elsewhere/1/1", Liveness: cannotTell})
	adm, err := other.Prepare(ctx, req("payout:7")) // the judging attempt need not say re-run safe: the claim did
	if err != nil || !adm.Fresh() || !adm.Ticket.Reclaimed {
		t.Fatalf("expired re-run-safe lease not reclaimed: %+v %v", adm, err)
	}
	if adm.Ticket.Token <= old.Token {
		t.Fatalf("reclaim token %d not above %d", adm.Ticket.Token, old.Token)
	}
	newCert := mustCommit(t, other, *adm.Ticket, `"new holder"`)
	_, err = eng.Commit(ctx, old, []byte(`"old holder"`))
	wantCode(t, err, fence.ErrLeaseLost)
	for _, op := range []func() error{
		func() error { return eng.Abort(ctx, old, "late") },
		func() error { return eng.Release(ctx, old, "late") },
		func() error { _, err := eng.Heartbeat(ctx, old); return err },
	} {
		wantCode(t, op(), fence.ErrLeaseLost)
	}
	st, _ := eng.Status(ctx, r.Intent)
	if st.State != fence.StateDone || st.Cert.Hash != newCert.Hash || string(st.Cert.Result) != `"new holder"` {
		t.Fatalf("recorded outcome is not the new holder's: %+v", st)
	}
	if s, _ := other.Stats(ctx); s.SinceBoot.Reclaimed != 1 {
		t.Fatalf("counters = %+v", s.SinceBoot)
	}
	if s, _ := eng.Stats(ctx); s.SinceBoot.LeaseLost != 4 {
		t.Fatalf("counters = %+v", s.SinceBoot)
	}
	kinds := eventKinds(t, eng, r.Intent)
	if !contains(kinds, fence.EventReclaim) || !contains(kinds, fence.EventLateResult) {
		t.Fatalf("takeover or late result not audited: %v", kinds)
	}
}

func testLeaseExpiryReclaimPolicy(t *testing.T, newStore Factory) {
	// on_lease_expiry=reclaim records every claim re-run safe; a fence engine judging it
	// honours what the claim recorded.
	st := newStore(t)
	rec := fence.New(st, fence.Config{LeaseTTL: 60 * time.Millisecond, OnLeaseExpiry: fence.Reclaim, Owner: "a/1/1", Liveness: cannotTell})
	judge := fence.New(st, fence.Config{LeaseTTL: 60 * time.Millisecond, Owner: "b/1/1", Liveness: cannotTell})
	r := req("idempotent:1")
	mustFresh(t, rec, r)
	if s, _ := judge.Status(ctx, r.Intent); !s.RerunSafe {
		t.Fatalf("claim under reclaim policy not recorded re-run safe: %+v", s)
	}
	time.Sleep(120 * time.Millisecond)
	adm, err := judge.Prepare(ctx, r)
	if err != nil || !adm.Fresh() || !adm.Ticket.Reclaimed {
		t.Fatalf("reclaim-policy claim not taken over: %+v %v", adm, err)
	}
	if p, err := fence.ParseExpiryPolicy("sometimes"); err == nil {
		t.Fatalf("bad policy accepted: %q", p)
	}
}

func testLeaseExpiryFence(t *testing.T, newStore Factory) {
	// The default: a lapsed claim of a holder that cannot be seen becomes unknown, never free.
	eng := fence.New(newStore(t), fence.Config{LeaseTTL: 60 * time.Millisecond, Liveness: cannotTell})
	other := fence.New(eng.Store(), fence.Config{LeaseTTL: 60 * time.Millisecond, Owner: "elsewhere/1/1", Liveness: cannotTell})
	r := req("kubectl:scale")
	mustFresh(t, eng, r)
	time.Sleep(120 * time.Millisecond)
	for i := 0; i < 2; i++ {
		_, err := other.Prepare(ctx, r)
		var pf fence.PriorFailureError
		if !errors.As(err, &pf) || pf.State != fence.StateUnknown {
			t.Fatalf("lapsed claim: %v, want prior_failure unknown", err)
		}
	}
	st, _ := eng.Status(ctx, r.Intent)
	if st.State != fence.StateUnknown || !st.Healable() {
		t.Fatalf("state = %+v, want healable unknown", st)
	}
	if kinds := eventKinds(t, eng, r.Intent); len(kinds) != 1 || kinds[0] != fence.EventExpired {
		t.Fatalf("events = %v, want one expired", kinds)
	}
}

func testLiveHolderNeverTakenOver(t *testing.T, newStore Factory) {
	// A holder this process sees alive keeps its claim while the lease runs and, after it,
	// the claim becomes unknown: never taken over, even when declared re-run safe.
	st := newStore(t)
	alive := func(string) fence.Liveness { return fence.Alive }
	holder := fence.New(st, fence.Config{LeaseTTL: 60 * time.Millisecond, Owner: "h/1/1", Liveness: alive})
	judge := fence.New(st, fence.Config{LeaseTTL: 60 * time.Millisecond, Owner: "h/2/1", Liveness: alive})
	r := req("stopped:1")
	r.RerunSafe = true
	tk := mustFresh(t, holder, r)
	time.Sleep(120 * time.Millisecond)
	_, err := judge.Prepare(ctx, r)
	var pf fence.PriorFailureError
	if !errors.As(err, &pf) || pf.State != fence.StateUnknown {
		t.Fatalf("lapsed live holder: %v, want prior_failure unknown", err)
	}
	// The holder wakes up (SIGCONT) and commits: healed, and the duplicate replays.
	c := mustCommit(t, holder, tk, `"charged once"`)
	adm, err := judge.Prepare(ctx, r)
	if err != nil || adm.Fresh() || adm.Cert.Hash != c.Hash {
		t.Fatalf("after heal: %+v %v, want replay", adm, err)
	}
}

func testLateSettleHeals(t *testing.T, newStore Factory) {
	st := newStore(t)
	eng := fence.New(st, fence.Config{LeaseTTL: 50 * time.Millisecond, Liveness: cannotTell})
	other := fence.New(st, fence.Config{LeaseTTL: 50 * time.Millisecond, Owner: "o/1/1", Liveness: cannotTell})
	lapse := func(intent string) fence.Ticket {
		t.Helper()
		tk := mustFresh(t, eng, req(intent))
		time.Sleep(100 * time.Millisecond)
		if _, err := other.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if s, _ := eng.Status(ctx, intent); s.State != fence.StateUnknown {
			t.Fatalf("%s: state %s after lapse, want unknown", intent, s.State)
		}
		return tk
	}
	tc := lapse("heal:commit")
	var pf fence.PriorFailureError
	if _, err := other.Prepare(ctx, req("heal:commit")); !errors.As(err, &pf) || !pf.Healable {
		t.Fatalf("lapsed claim: %v; want a healable prior_failure", err)
	}
	// A wait never outlives the lease it waits on: a waiter is answered at once with the
	// healable unknown, and a retry after the holder's late commit receives the real result.
	start := time.Now()
	if _, err := other.PrepareWait(ctx, req("heal:commit"), 30*time.Second); !errors.As(err, &pf) || !pf.Healable {
		t.Fatalf("waiter on a lapsed claim: %v; want a healable prior_failure", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the waiter waited %s on a lapsed claim", took)
	}
	c := mustCommit(t, eng, tc, `"ok"`)
	if adm, err := other.PrepareWait(ctx, req("heal:commit"), 30*time.Second); err != nil || adm.Fresh() || string(adm.Cert.Result) != `"ok"` {
		t.Fatalf("retry after the heal: %+v %v, want the holder's result", adm, err)
	}
	if again := mustCommit(t, eng, tc, `"ok"`); again.Hash != c.Hash {
		t.Fatal("retried healing commit returned another cert")
	}
	if kinds := eventKinds(t, eng, "heal:commit"); !contains(kinds, fence.EventHeal) {
		t.Fatalf("heal not audited: %v", kinds)
	}

	tr := lapse("heal:release")
	if err := eng.Release(ctx, tr, "never sent"); err != nil {
		t.Fatal(err)
	}
	if s, _ := eng.Status(ctx, "heal:release"); s.State != fence.StateNone {
		t.Fatalf("late release: state %s, want free", s.State)
	}
	ta := lapse("heal:abort")
	if err := eng.Abort(ctx, ta, "timeout"); err != nil {
		t.Fatal(err)
	}
	if s, _ := eng.Status(ctx, "heal:abort"); s.State != fence.StateFailed {
		t.Fatalf("late abort: state %s, want failed", s.State)
	}
	// A heartbeat of the claim itself revives it.
	th := lapse("heal:heartbeat")
	next, err := eng.Heartbeat(ctx, th)
	if err != nil {
		t.Fatalf("late heartbeat: %v", err)
	}
	if s, _ := eng.Status(ctx, "heal:heartbeat"); s.State != fence.StateInFlight {
		t.Fatalf("late heartbeat: state %s, want in_flight", s.State)
	}
	mustCommit(t, eng, next, `"done after all"`)

	// Unknown because the holder said so (Lost) or failed by Abort: not healable, and a
	// waiter is refused at once.
	tl := mustFresh(t, eng, req("heal:lost"))
	if err := eng.Lost(ctx, tl, "transport died"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.PrepareWait(ctx, req("heal:lost"), time.Hour); !errors.As(err, &pf) || pf.Healable {
		t.Fatalf("waiter on a lost intent: %v; want an unhealable prior_failure at once", err)
	}
	_, err = eng.Commit(ctx, tl, []byte(`1`))
	wantCode(t, err, fence.ErrLeaseLost)
	if s, _ := eng.Status(ctx, "heal:lost"); s.State != fence.StateUnknown {
		t.Fatalf("lost then commit: state %s, want unknown", s.State)
	}
	// A forged nonce heals nothing.
	tf := lapse("heal:forged")
	forged := tf
	forged.Nonce = "00"
	_, err = eng.Commit(ctx, forged, []byte(`1`))
	wantCode(t, err, fence.ErrLeaseLost)
}

func testLateAfterClear(t *testing.T, newStore Factory) {
	st := newStore(t)
	eng := fence.New(st, fence.Config{LeaseTTL: 50 * time.Millisecond, Liveness: cannotTell})
	r := req("late:cleared")
	old := mustFresh(t, eng, r)
	time.Sleep(100 * time.Millisecond)
	if _, err := eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Clear(ctx, r.Intent, "ops", "checked: no charge"); err != nil {
		t.Fatal(err)
	}
	cur := mustFresh(t, eng, r)
	_, err := eng.Commit(ctx, old, []byte(`{"charge":"ch_late"}`))
	wantCode(t, err, fence.ErrLeaseLost)
	var late []fence.Event
	_ = st.View(ctx, func(tx fence.Tx) error {
		return tx.Events(r.Intent, func(ev fence.Event) bool {
			if ev.Kind == fence.EventLateResult {
				late = append(late, ev)
			}
			return true
		})
	})
	if len(late) != 1 || !strings.Contains(late[0].Reason, `{"charge":"ch_late"}`) || late[0].State != fence.StateInFlight {
		t.Fatalf("late result not kept in the audit trail: %+v", late)
	}
	mustCommit(t, eng, cur, `"current"`)
	if s, _ := eng.Status(ctx, r.Intent); string(s.Cert.Result) != `"current"` {
		t.Fatalf("late result overwrote the current claim: %s", s.Cert.Result)
	}
	// A sweep long after drops ordinary events, never the clear or the late result.
	time.Sleep(20 * time.Millisecond)
	sweeper := fence.New(st, fence.Config{ResultTTL: 10 * time.Millisecond})
	if _, err := sweeper.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if kinds := eventKinds(t, sweeper, r.Intent); strings.Join(kinds, ",") != "clear,late_result" {
		t.Fatalf("after sweep: events %v, want clear,late_result", kinds)
	}
}

func testRecoverBoundsInFlight(t *testing.T, newStore Factory) {
	st := newStore(t)
	dead := func(o string) fence.Liveness {
		if o == "gone/1/1" {
			return fence.Dead
		}
		return fence.Alive
	}
	silent := fence.New(st, fence.Config{LeaseTTL: 50 * time.Millisecond, Owner: "h/1/1", Liveness: dead})
	gone := fence.New(st, fence.Config{LeaseTTL: time.Hour, Owner: "gone/1/1", Liveness: dead})
	ops := fence.New(st, fence.Config{Owner: "ops/1/1", Liveness: dead})
	mustFresh(t, silent, req("abandoned:1"))
	mustFresh(t, gone, req("orphan:plain"))
	safe := req("orphan:safe")
	safe.RerunSafe = true
	mustFresh(t, gone, safe)
	time.Sleep(100 * time.Millisecond)
	n, err := ops.Recover(ctx)
	if err != nil || n != 3 {
		t.Fatalf("recover = %d, %v; want 3", n, err)
	}
	for intent, want := range map[string]fence.State{"abandoned:1": fence.StateUnknown, "orphan:plain": fence.StateUnknown, "orphan:safe": fence.StateNone} {
		if s, _ := ops.Status(ctx, intent); s.State != want {
			t.Fatalf("%s: state %s, want %s", intent, s.State, want)
		}
	}
	if kinds := eventKinds(t, ops, "orphan:safe"); len(kinds) != 1 || kinds[0] != fence.EventReclaim {
		t.Fatalf("freed re-run-safe claim: events %v", kinds)
	}
	if n, _ := ops.Recover(ctx); n != 0 {
		t.Fatalf("second recover changed %d claims", n)
	}
}

// DownStore wraps a store and fails every Update with ErrDown while Down is set: a ledger that
// cannot be written (a database out of reach, a full disk). Reads still work.
type DownStore struct {
	fence.Store
	Down atomic.Bool
}

// ErrDown is what a DownStore's writes fail with while it is down.
var ErrDown = errors.New("ledger unreachable (test)")

func (f *DownStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if f.Down.Load() {
		return ErrDown
	}
	return f.Store.Update(ctx, fn)
}

func testSettleSpool(t *testing.T, newStore Factory) {
	st := &DownStore{Store: newStore(t)}
	dir := t.TempDir()
	eng := fence.New(st, fence.Config{SpoolDir: dir})
	r := req("settle:1")
	tk := mustFresh(t, eng, r)

	// The ledger comes back while Settle retries: the commit lands, the spool is emptied.
	st.Down.Store(true)
	go func() { time.Sleep(300 * time.Millisecond); st.Down.Store(false) }()
	cert, err := eng.Settle(ctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: tk, Result: []byte(`"paid"`)})
	if err != nil || string(cert.Result) != `"paid"` {
		t.Fatalf("settle across an outage: %v %v", cert, err)
	}
	if files, _ := fence.SpoolFiles(dir); len(files) != 0 {
		t.Fatalf("spool not emptied: %v", files)
	}

	// The ledger stays down past the deadline: the outcome waits in the spool, and the next
	// engine over the ledger records it.
	tk2 := mustFresh(t, eng, req("settle:2"))
	st.Down.Store(true)
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = eng.Settle(dctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: tk2, Result: []byte(rawResult)})
	var sp fence.SpooledError
	if !errors.As(err, &sp) || !errors.Is(err, ErrDown) {
		t.Fatalf("settle with the ledger down: %v, want SpooledError", err)
	}
	if files, _ := fence.SpoolFiles(dir); len(files) != 1 {
		t.Fatalf("spool = %v, want one outcome", files)
	}
	st.Down.Store(false)
	next := fence.New(st, fence.Config{SpoolDir: dir, Owner: "next/1/1", Liveness: cannotTell})
	if _, err := next.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	// Recorded as the tool returned it, byte for byte (the spool file is JSON too).
	if s, _ := next.Status(ctx, "settle:2"); s.State != fence.StateDone || string(s.Cert.Result) != rawResult {
		t.Fatalf("spooled commit not recorded as it was returned at the next start: %+v", s)
	}
	if files, _ := fence.SpoolFiles(dir); len(files) != 0 {
		t.Fatalf("spool not emptied after recover: %v", files)
	}
	// A refusal is an answer, not a reason to retry.
	_, err = eng.Settle(ctx, fence.Outcome{Kind: fence.OutcomeRelease, Ticket: tk2})
	wantCode(t, err, fence.ErrLeaseLost)
}

// landsThenFails wraps a store: while armed, the next Update lands and its answer is lost (a
// connection that died after COMMIT), and then runs after, as another process would before
// the caller tries again.
type landsThenFails struct {
	fence.Store
	armed atomic.Bool
	after func()
}

func (s *landsThenFails) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if !s.armed.CompareAndSwap(true, false) {
		return s.Store.Update(ctx, fn)
	}
	if err := s.Store.Update(ctx, fn); err != nil {
		return err
	}
	s.after()
	return ErrDown
}

// testRetriedReleaseLanded: a release lands but its answer is lost; a duplicate in another
// process then claims the freed intent; Settle's retry of the release must be recognised as
// the report that landed (the release event carries the claim's token): answered nil,
// neither counted lease_lost nor audited as a late result, the new claim untouched. Every
// store alike: the SQLite store's events once kept no token, so there (only) the retry was
// refused lease_lost, "no claim is recorded", which was false (TestStoresAgree, seeds 20 and
// 59 of EFFECTFENCE_DIFF_RUNS=60).
func testRetriedReleaseLanded(t *testing.T, newStore Factory) {
	raw := newStore(t)
	st := &landsThenFails{Store: raw}
	holder := fence.New(st, fence.Config{Owner: "holder/1/1", Liveness: cannotTell})
	other := fence.New(raw, fence.Config{Owner: "other/2/2", Liveness: cannotTell})
	r := req("release-landed:1")
	tk := mustFresh(t, holder, r)
	var dup fence.Admission
	var dupErr error
	st.after = func() { dup, dupErr = other.Prepare(ctx, r) }
	st.armed.Store(true)
	if _, err := holder.Settle(ctx, fence.Outcome{Kind: fence.OutcomeRelease, Ticket: tk, Reason: "tool said no"}); err != nil {
		t.Fatalf("release retried after it landed, a new claim since: %v; want nil (the release was recorded)", err)
	}
	if dupErr != nil || !dup.Fresh() {
		t.Fatalf("duplicate after the release landed: %+v %v; want admitted", dup, dupErr)
	}
	if kinds := eventKinds(t, other, r.Intent); contains(kinds, fence.EventLateResult) {
		t.Fatalf("events %v: the retried release was kept as a late result", kinds)
	}
	if err := holder.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := holder.Stats(ctx); err != nil || s.SinceBoot.LeaseLost != 0 {
		t.Fatalf("holder's counts %+v (%v): want no lease_lost", s.SinceBoot, err)
	}
	if s, err := other.Status(ctx, r.Intent); err != nil || s.State != fence.StateInFlight || s.Token != dup.Ticket.Token {
		t.Fatalf("the duplicate's claim after the retried release: %+v %v; want it in flight, untouched", s, err)
	}
	if _, err := other.Commit(ctx, *dup.Ticket, []byte(`"ok"`)); err != nil {
		t.Fatalf("the duplicate's commit: %v", err)
	}
}

func cannotTell(string) fence.Liveness { return fence.CannotTell }

func eventKinds(t *testing.T, eng *fence.Engine, intent string) []string {
	t.Helper()
	var kinds []string
	err := eng.Store().View(ctx, func(tx fence.Tx) error {
		return tx.Events(intent, func(ev fence.Event) bool {
			kinds = append(kinds, ev.Kind)
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return kinds
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func testHeartbeat(t *testing.T, newStore Factory) {
	// Each heartbeat comes 200 ms after the one before, 300 ms before the lease would lapse: a
	// margin a loaded machine (a fsync, a descheduled test) keeps; 120 ms and 50 ms did not.
	eng := fence.New(newStore(t), fence.Config{LeaseTTL: 500 * time.Millisecond})
	r := req("slow:1")
	tk := mustFresh(t, eng, r)
	for i := 0; i < 4; i++ {
		time.Sleep(200 * time.Millisecond)
		next, err := eng.Heartbeat(ctx, tk)
		if err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
		if next.LeaseUntil.Before(tk.LeaseUntil) {
			t.Fatalf("lease went backwards")
		}
		tk = next
	}
	// 800 ms after the claim, longer than one lease: still held.
	if _, err := eng.Prepare(ctx, r); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("heartbeated lease was taken over: %v", err)
	}
	mustCommit(t, eng, tk, `"slow done"`)
}

func testAbortFences(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("wire:99")
	tk := mustFresh(t, eng, r)
	if err := eng.Abort(ctx, tk, "gateway timeout, outcome unknown"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		_, err := eng.Prepare(ctx, r)
		var pf fence.PriorFailureError
		if !errors.As(err, &pf) || pf.State != fence.StateFailed {
			t.Fatalf("after abort: %v", err)
		}
	}
	lost := req("wire:100")
	tl := mustFresh(t, eng, lost)
	if err := eng.Lost(ctx, tl, "connection to the bank dropped mid-call"); err != nil {
		t.Fatal(err)
	}
	var pfl fence.PriorFailureError
	if _, err := eng.Prepare(ctx, lost); !errors.As(err, &pfl) || pfl.State != fence.StateUnknown {
		t.Fatalf("after lost: %v, want prior_failure with state unknown", err)
	}
	if _, err := eng.Clear(ctx, r.Intent, "ops@example", ""); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("clear without reason: %v", err)
	}
	prev, err := eng.Clear(ctx, r.Intent, "ops@example", "checked the bank: no transfer")
	if err != nil || prev.State != fence.StateFailed {
		t.Fatalf("clear: %+v %v", prev, err)
	}
	var clears []fence.Event
	_ = eng.Store().View(ctx, func(tx fence.Tx) error {
		return tx.Events(r.Intent, func(ev fence.Event) bool {
			if ev.Kind == fence.EventClear {
				clears = append(clears, ev)
			}
			return true
		})
	})
	if len(clears) != 1 || clears[0].Who != "ops@example" || clears[0].Reason != "checked the bank: no transfer" || clears[0].State != fence.StateFailed {
		t.Fatalf("clear not recorded with who and why: %+v", clears)
	}
	mustCommit(t, eng, mustFresh(t, eng, r), `"sent"`)
	if _, err := eng.Clear(ctx, "never-seen", "ops", "x"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("clear of unknown intent: %v", err)
	}
}

func testReleaseFrees(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("email:welcome")
	r.Domain = "user:5"
	tk := mustFresh(t, eng, r)
	if err := eng.Release(ctx, tk, "validation failed before sending"); err != nil {
		t.Fatal(err)
	}
	if st, _ := eng.Status(ctx, r.Intent); st.State != fence.StateNone {
		t.Fatalf("released intent state = %s", st.State)
	}
	tk2 := mustFresh(t, eng, r)
	if tk2.Token <= tk.Token || tk2.Seq != 2 {
		t.Fatalf("after release: %+v (first %+v)", tk2, tk)
	}
	// The released ticket cannot commit over the new claim.
	_, err := eng.Commit(ctx, tk, []byte(`1`))
	wantCode(t, err, fence.ErrLeaseLost)
	mustCommit(t, eng, tk2, `"sent"`)
}

func testStaleCommit(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	// Agent A decides on inventory:1 at 0 and its effect targets order:1.
	a := req("ship:1")
	a.Domain = "order:1"
	a.ReadSet = []fence.ReadSetEntry{{Domain: "inventory:1", Seq: 0}, {Domain: "order:1", Seq: 0}}
	tk := mustFresh(t, eng, a)
	// While A runs, B moves inventory:1.
	b := fence.Request{Intent: "restock:1", Tool: "restock", Domain: "inventory:1"}
	mustCommit(t, eng, mustFresh(t, eng, b), `"ok"`)
	_, err := eng.Commit(ctx, tk, []byte(`"shipped"`))
	var stale fence.StaleReadSetError
	if !errors.As(err, &stale) || !stale.Executed || stale.Domain != "inventory:1" || stale.Expected != 0 || stale.Actual != 1 {
		t.Fatalf("stale commit: %v", err)
	}
	if st, _ := eng.Status(ctx, a.Intent); st.State != fence.StateFailed {
		t.Fatalf("state after stale commit = %s, want failed", st.State)
	}
	_, err = eng.Prepare(ctx, a)
	wantCode(t, err, fence.ErrPriorFailure)

	// Its own reservation of the target domain does not make a read set stale.
	c := req("ship:2")
	c.Domain = "order:2"
	c.ReadSet = []fence.ReadSetEntry{{Domain: "order:2", Seq: 0}}
	mustCommit(t, eng, mustFresh(t, eng, c), `"shipped"`)
}

func testStaleAtPrepare(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	mustCommit(t, eng, mustFresh(t, eng, fence.Request{Intent: "x1", Tool: "t", Domain: "d"}), `1`)
	r := fence.Request{Intent: "x2", Tool: "t", Domain: "e", ReadSet: []fence.ReadSetEntry{{Domain: "d", Seq: 0}}}
	_, err := eng.Prepare(ctx, r)
	var stale fence.StaleReadSetError
	if !errors.As(err, &stale) || stale.Executed || stale.Actual != 1 || stale.Expected != 0 || stale.Domain != "d" {
		t.Fatalf("stale at prepare: %v", err)
	}
	if st, _ := eng.Status(ctx, "x2"); st.State != fence.StateNone {
		t.Fatalf("refused attempt left state %s", st.State)
	}
	if cur, _ := eng.Current(ctx, "e"); cur != 0 {
		t.Fatalf("refused attempt reserved a number: %d", cur)
	}
	r.ReadSet[0].Seq = 1
	mustFresh(t, eng, r)
}

func testConflict(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("buy:book")
	tk := mustFresh(t, eng, r)
	other := r
	other.Args = []byte(`{"amount":9900}`)
	_, err := eng.Prepare(ctx, other) // in flight, different call
	wantCode(t, err, fence.ErrConflict)
	mustCommit(t, eng, tk, `"bought"`)
	adm, err := eng.Prepare(ctx, other) // done, different call: never the receipt
	if err == nil || adm.Cert != nil {
		t.Fatalf("conflicting call got %+v", adm)
	}
	var ce fence.IntentConflictError
	if !errors.As(err, &ce) || ce.Recorded == ce.Presented || fence.CodeOf(err) != fence.CodeConflict {
		t.Fatalf("conflict error: %v", err)
	}
	otherTool := r
	otherTool.Tool = "refund"
	_, err = eng.Prepare(ctx, otherTool)
	wantCode(t, err, fence.ErrConflict)
}

// testEmptyArgsAlike: with Request.EmptyArgsAlike (serve's), absent or null args and {} are
// one call. A retry in one form of an intent claimed in another is refused in flight, then
// replayed the first attempt's cert, never refused as a conflict (whose advice, a distinct
// intent, would run the effect a second time); a lapsed claim is taken over by it. The record
// and the cert keep the first attempt's form and fingerprint. Without the flag, and for any
// other arguments, the forms are different calls, as before.
func testEmptyArgsAlike(t *testing.T, newStore Factory) {
	forms := []struct {
		name      string
		args      []byte
		canonical string
	}{{"absent", nil, "null"}, {"null", []byte("null"), "null"}, {"empty", []byte(" { } "), "{}"}}
	eng := fence.New(newStore(t), fence.Config{})
	for _, first := range forms {
		for _, retry := range forms {
			intent := "ping:" + first.name + "-then-" + retry.name
			r := fence.Request{Intent: intent, Tool: "ping", Args: first.args, EmptyArgsAlike: true}
			want, err := eng.Fingerprint(r.Tool, first.args)
			if err != nil {
				t.Fatal(err)
			}
			tk := mustFresh(t, eng, r)
			again := r
			again.Args = retry.args
			_, err = eng.Prepare(ctx, again)
			wantCode(t, err, fence.ErrInFlight)
			cert := mustCommit(t, eng, tk, `"pong"`)
			adm, err := eng.Prepare(ctx, again)
			if err != nil || adm.Cert == nil || adm.Cert.Hash != cert.Hash {
				t.Fatalf("%s: a retry in another form of a done intent: %+v %v; want the cert %s", intent, adm, err, cert.Hash)
			}
			rec, err := eng.Status(ctx, intent)
			if err != nil || rec.Fingerprint != want || string(rec.Args) != first.canonical || string(rec.Cert.Args) != first.canonical {
				t.Fatalf("%s: the record holds fingerprint %s, args %s, cert args %s; want the first form's (%s, %s)", intent, rec.Fingerprint, rec.Args, rec.Cert.Args, want, first.canonical)
			}
			plain := again
			plain.EmptyArgsAlike = false
			if _, err := eng.Prepare(ctx, plain); (first.canonical != retry.canonical) != errors.Is(err, fence.ErrConflict) {
				t.Fatalf("%s without EmptyArgsAlike: %v", intent, err)
			}
			for _, other := range []string{`{"n":null}`, `[]`, `""`, `false`, `0`} {
				differs := again
				differs.Args = []byte(other)
				_, err := eng.Prepare(ctx, differs)
				wantCode(t, err, fence.ErrConflict)
			}
		}
	}

	// A lapsed re-run-safe claim made without args, taken over by an attempt with {}: the new
	// claim, and the cert it commits, keep the form of the first.
	st := newStore(t)
	holder := fence.New(st, fence.Config{LeaseTTL: time.Nanosecond, Owner: "a/1/1", Liveness: cannotTell})
	taker := fence.New(st, fence.Config{Owner: "b/1/1", Liveness: cannotTell})
	r := fence.Request{Intent: "sync:now", Tool: "sync", RerunSafe: true, EmptyArgsAlike: true}
	mustFresh(t, holder, r)
	r.Args, r.ExactArgs = []byte(`{}`), []byte(`{}`)
	adm, err := taker.Prepare(ctx, r)
	if err != nil || !adm.Fresh() || !adm.Ticket.Reclaimed {
		t.Fatalf("a lapsed claim made without args, asked for with {}: %+v %v; want it taken over", adm, err)
	}
	want, _ := eng.Fingerprint("sync", nil)
	if rec, _ := taker.Status(ctx, r.Intent); rec.Fingerprint != want || string(rec.Args) != "null" || rec.ExactArgs != nil {
		t.Fatalf("the claim taken over with {} records fingerprint %s, args %s, exact args %q; want the first form's (%s, null, none)", rec.Fingerprint, rec.Args, rec.ExactArgs, want)
	}
	if cert := mustCommit(t, taker, *adm.Ticket, `"synced"`); string(cert.Args) != "null" {
		t.Fatalf("the cert of the claim taken over with {} holds args %s; want null, the first form", cert.Args)
	}
}

// testSupersedeNeverOverwrites: a done record superseded after its replay window moves to
// fence.SupersededIntent, a name any caller may also use as an intent. The move must never
// overwrite what is there: another action's claim in flight keeps its lease and records its
// outcome, and the moved record goes to the next free name. Two executions with the same
// cert (no domain, the same result) move to distinct names too.
func testSupersedeNeverOverwrites(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("order:9")
	first := mustCommit(t, eng, mustFresh(t, eng, r), `{"charge":"first"}`)
	base := fence.SupersededIntent(r.Intent, first.Hash)

	// Another action happens to use that name, and is in flight.
	other := req(base)
	other.Tool = "refund"
	otherTk := mustFresh(t, eng, other)

	// order:9 again, past its replay window: its done record must move aside, not onto the
	// refund's claim.
	time.Sleep(20 * time.Millisecond)
	again := r
	again.ReplayWindow = time.Millisecond
	secondTk := mustFresh(t, eng, again)
	mustCommit(t, eng, otherTk, `{"refund":"done"}`)
	if rec, err := eng.Status(ctx, base); err != nil || rec.State != fence.StateDone || rec.Tool != "refund" {
		t.Fatalf("%s holds %+v (%v); want the refund's own done record", base, rec, err)
	}
	moved := base + "~2"
	rec, err := eng.Status(ctx, moved)
	if err != nil || rec.State != fence.StateDone || rec.Cert == nil || rec.Cert.Hash != first.Hash || !fence.IsSupersededName(moved, r.Intent, first.Hash) {
		t.Fatalf("%s holds %+v (%v); want order:9's first done record", moved, rec, err)
	}

	// The second execution records the same cert (same tool, args, result and clock): when it
	// is superseded in turn, both names it could take are held, so it moves to the third.
	second := mustCommit(t, eng, secondTk, `{"charge":"first"}`)
	if second.Hash != first.Hash {
		t.Fatalf("second cert %s, want the same as the first (%s) for this test", second.Hash, first.Hash)
	}
	time.Sleep(20 * time.Millisecond)
	mustFresh(t, eng, again)
	for i, name := range []string{base, moved, base + "~3"} {
		rec, err := eng.Status(ctx, name)
		want := []string{"refund", "charge_card", "charge_card"}[i]
		if err != nil || rec.State != fence.StateDone || rec.Tool != want {
			t.Fatalf("%s holds %+v (%v); want a done %s record", name, rec, err, want)
		}
	}
	if a, _ := eng.Status(ctx, moved); a.Token == 0 {
		t.Fatalf("%s lost its token: %+v", moved, a)
	} else if b, _ := eng.Status(ctx, base+"~3"); a.Token == b.Token {
		t.Fatalf("%s and %s hold the same execution (token %d): one overwrote the other", moved, base+"~3", a.Token)
	}
}

// testSupersedeRepeatedPastTheNames: an action repeated identically (one cert each time) after
// its replay window, more often than there are numbered names within its result TTL (a coding
// agent's git pull, a status post every quarter hour), is admitted every time: once the
// numbered names are held, the superseded record moves to a name of its own, which
// IsSupersededName knows (ledger verify). Before 2026-12-06 the seventeenth repeat was refused
// ("cannot be moved aside") until one of the sixteen records expired: for up to the result TTL
// (24 h by default).
func testSupersedeRepeatedPastTheNames(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("status:post")
	r.ReplayWindow = time.Millisecond
	var first *fence.Cert
	const repeats = 19
	for i := 0; i <= repeats; i++ {
		if i > 0 {
			time.Sleep(5 * time.Millisecond) // past the window
		}
		adm, err := eng.Prepare(ctx, r)
		if err != nil || !adm.Fresh() {
			t.Fatalf("repeat %d: %+v %v; want it admitted", i, adm, err)
		}
		c := mustCommit(t, eng, *adm.Ticket, `{"posted":"all green"}`)
		if first == nil {
			first = c
		} else if c.Hash != first.Hash {
			t.Fatalf("repeat %d has cert %s, want the first's (%s) for this test", i, c.Hash, first.Hash)
		}
	}
	var moved []string
	err := eng.Store().View(ctx, func(tx fence.Tx) error {
		return tx.Events(r.Intent, func(ev fence.Event) bool {
			if ev.Kind == fence.EventSuperseded {
				_, name, _ := strings.Cut(ev.Reason, "the done record is kept as ")
				moved = append(moved, name)
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != repeats {
		t.Fatalf("%d superseded events, want %d: %q", len(moved), repeats, moved)
	}
	seen := map[string]bool{}
	for _, name := range moved {
		rec, err := eng.Status(ctx, name)
		if err != nil || rec.State != fence.StateDone || rec.Cert == nil || rec.Cert.Hash != first.Hash || seen[name] || !fence.IsSupersededName(name, r.Intent, first.Hash) {
			t.Fatalf("%q holds %+v (%v); want one of the moved done records, each under a name of its own", name, rec, err)
		}
		seen[name] = true
	}
}

// testRefusedLateAttemptMovesNothing: an identical attempt past the replay window is a new
// action, but one that its read set refuses is not admitted, so the done record stays where
// it is and nothing is written. (The engine moved the record aside before judging the read
// set: every refused retry left another copy, and once the names ran out the intent was
// stuck.)
func testRefusedLateAttemptMovesNothing(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("order:late")
	r.ReadSet = []fence.ReadSetEntry{{Domain: "stock", Seq: 0}}
	first := mustCommit(t, eng, mustFresh(t, eng, r), `{"charge":"first"}`)
	mover := req("restock")
	mover.Domain = "stock"
	mustCommit(t, eng, mustFresh(t, eng, mover), `{"restocked":1}`) // stock moves to 1
	before := eventKinds(t, eng, r.Intent)

	time.Sleep(20 * time.Millisecond)
	again := r
	again.ReplayWindow = time.Millisecond
	base := fence.SupersededIntent(r.Intent, first.Hash)
	for range 3 {
		_, err := eng.Prepare(ctx, again)
		wantCode(t, err, fence.ErrStaleReadSet)
		if rec, err := eng.Status(ctx, r.Intent); err != nil || rec.State != fence.StateDone || rec.Cert == nil || rec.Cert.Hash != first.Hash {
			t.Fatalf("%s = %+v, %v; want its done record, in place", r.Intent, rec, err)
		}
		for _, name := range []string{base, base + "~2"} {
			if rec, err := eng.Status(ctx, name); err != nil || rec.State != fence.StateNone {
				t.Fatalf("a refused attempt moved the done record to %s: %+v, %v", name, rec, err)
			}
		}
	}
	if after := eventKinds(t, eng, r.Intent); len(after) != len(before) {
		t.Fatalf("refused attempts wrote events %v (before: %v)", after, before)
	}

	// With a read set that holds, the late attempt is admitted and the record moves aside.
	again.ReadSet = []fence.ReadSetEntry{{Domain: "stock", Seq: 1}}
	tk := mustFresh(t, eng, again)
	if rec, err := eng.Status(ctx, base); err != nil || rec.State != fence.StateDone || rec.Cert == nil || rec.Cert.Hash != first.Hash {
		t.Fatalf("%s = %+v, %v; want the first done record, moved aside", base, rec, err)
	}
	mustCommit(t, eng, tk, `{"charge":"second"}`)
}

func testSweep(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{ResultTTL: 80 * time.Millisecond})
	old := mustCommit(t, eng, mustFresh(t, eng, req("old")), `"old"`)
	tk := mustFresh(t, eng, req("aborted"))
	if err := eng.Abort(ctx, tk, "unknown"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	// The young outcome is kept for an hour (an engine of another configuration on the same
	// store), so a slow machine between its commit and the sweep cannot expire it too.
	keeps := fence.New(eng.Store(), fence.Config{ResultTTL: time.Hour})
	mustCommit(t, keeps, mustFresh(t, keeps, req("young")), `"young"`)
	// An expired outcome is not replayed even before a sweep.
	if st, _ := eng.Status(ctx, "old"); st.State != fence.StateNone {
		t.Fatalf("expired outcome still reported: %s", st.State)
	}
	n, err := eng.Sweep(ctx)
	if err != nil || n != 1 {
		t.Fatalf("sweep = %d, %v; want 1", n, err)
	}
	var left []string
	_ = eng.Store().View(ctx, func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(r *fence.Record) bool { left = append(left, r.Intent+"="+string(r.State)); return true })
	})
	if fmt.Sprint(left) != "[aborted=failed young=done]" {
		t.Fatalf("after sweep: %v", left)
	}
	tk = mustFresh(t, eng, req("old")) // runs again: its outcome expired
	c := mustCommit(t, eng, tk, `"old again"`)
	if c.Hash == old.Hash {
		t.Fatal("new execution produced the expired cert")
	}
}

// testSweepBacklog: Sweep drops every done record whose expiry has passed, over several
// batches, and counts them; it keeps young outcomes, outcomes without an expiry, and every
// record that is not done even if it carries a past expiry; it drops old audit events except
// those kept forever. It runs on the store as it is and with its Tx's optional interfaces
// hidden, so both the store's own sweep (fence.ExpiredSweeper) and the engine's scan and
// delete are checked on every store.
func testSweepBacklog(t *testing.T, newStore Factory) {
	for _, c := range []struct {
		name string
		wrap func(fence.Store) fence.Store
	}{
		{"own", func(s fence.Store) fence.Store { return s }},
		{"generic", func(s fence.Store) fence.Store { return plainStore{s} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			// 2,000 fill two batches exactly (the third finds none); 345 more end in a batch
			// that is not full.
			for _, expired := range []int{2000, 345} {
				sweepBacklog(t, c.wrap(newStore(t)), expired)
			}
		})
	}
}

func sweepBacklog(t *testing.T, st fence.Store, expired int) {
	t.Helper()
	const ttl = time.Hour
	eng := fence.New(st, fence.Config{ResultTTL: ttl})
	keep := map[string]fence.State{}
	var now time.Time
	put := func(intent string, state fence.State, expiry time.Duration) *fence.Record {
		rec := &fence.Record{Intent: intent, State: state, Tool: "t", Args: []byte("null"), Token: 1,
			ClaimedAt: now, LeaseUntil: now.Add(time.Minute), UpdatedAt: now}
		if expiry != 0 {
			rec.ExpiresAt = now.Add(expiry)
		}
		if state == fence.StateDone {
			rec.Cert = &fence.Cert{Intent: intent, Tool: "t", Args: []byte("null"), Result: []byte(`"r"`), Hash: "h-" + intent}
		}
		return rec
	}
	for i := 0; i < expired; i += 1000 {
		err := st.Update(ctx, func(tx fence.Tx) error {
			now = tx.Now()
			for j := i; j < min(i+1000, expired); j++ {
				// Expiry order unrelated to intent order; some share an instant.
				if err := tx.Put(put(fmt.Sprintf("old:%05d", j), fence.StateDone, -time.Minute-time.Duration((j*37)%1009)*time.Millisecond)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	err := st.Update(ctx, func(tx fence.Tx) error {
		now = tx.Now()
		for _, r := range []*fence.Record{
			put("young", fence.StateDone, time.Hour),
			put("forever", fence.StateDone, 0),
			put("failed", fence.StateFailed, -time.Hour),
			put("unknown", fence.StateUnknown, -time.Hour),
			put("in-flight", fence.StateInFlight, -time.Hour),
		} {
			keep[r.Intent] = r.State
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		// docs/privacy.md: audit events go with the records, "except operator clears and
		// resolves and late_result events, which are kept for good".
		evs := []fence.Event{{At: now.Add(-2 * ttl), Intent: "old:00000", Kind: fence.EventReclaim, Reason: "old"}}
		for _, kind := range fence.KeptForeverKinds() {
			evs = append(evs, fence.Event{At: now.Add(-2 * ttl), Intent: "failed", Kind: kind, Reason: "old, kept " + kind})
		}
		evs = append(evs, fence.Event{At: now, Intent: "young", Kind: fence.EventReclaim, Reason: "young"})
		for _, ev := range evs {
			if err := tx.AppendEvent(ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err := eng.Sweep(ctx)
	if err != nil || n != expired {
		t.Fatalf("sweep = %d, %v; want %d", n, err, expired)
	}
	if n, err := eng.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep = %d, %v; want 0", n, err)
	}
	left := map[string]fence.State{}
	var events []string
	err = st.View(ctx, func(tx fence.Tx) error {
		clear(left)
		events = events[:0]
		if err := tx.Scan(fence.Filter{}, func(r *fence.Record) bool { left[r.Intent] = r.State; return true }); err != nil {
			return err
		}
		return tx.Events("", func(ev fence.Event) bool { events = append(events, ev.Reason); return true })
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(left) != fmt.Sprint(keep) {
		t.Fatalf("after sweeping %d expired outcomes: %v; want %v", expired, left, keep)
	}
	want := []string{}
	for _, kind := range []string{fence.EventClear, fence.EventLateResult, fence.EventResolveHappened, fence.EventResolveDidNotHappen, fence.EventResolveLeaveFenced} {
		want = append(want, "old, kept "+kind)
	}
	if want = append(want, "young"); fmt.Sprint(events) != fmt.Sprint(want) {
		t.Fatalf("events after the sweep: %q; want the operator's clears and resolves, the late result and the young event", events)
	}
}

// plainStore hides the optional interfaces of a store's transactions (fence.ExpiredSweeper),
// so that the engine takes its generic path on it.
type plainStore struct{ fence.Store }

type plainTx struct{ fence.Tx }

func (s plainStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	return s.Store.Update(ctx, func(tx fence.Tx) error { return fn(plainTx{tx}) })
}

func (s plainStore) View(ctx context.Context, fn func(fence.Tx) error) error {
	return s.Store.View(ctx, func(tx fence.Tx) error { return fn(plainTx{tx}) })
}

// testScanByExpiry: a ByExpiry scan gives the records that carry an expiry, the oldest first,
// at most Limit of them, after the other terms of the filter; one without a Limit or with
// After is refused. Sweep's batches are such scans.
func testScanByExpiry(t *testing.T, newStore Factory) {
	st := newStore(t)
	// Minutes from now to each record's expiry, in an order unrelated to the intents'; "open"
	// is in flight and has none.
	expiry := map[string]int{"m": -10, "a": -30, "z": -50, "q": -20, "b": -40, "d": 60, "open": 0}
	var now time.Time
	err := st.Update(ctx, func(tx fence.Tx) error {
		now = tx.Now()
		for intent, min := range expiry {
			rec := &fence.Record{Intent: intent, State: fence.StateInFlight, Tool: "t", Args: []byte("null"), ClaimedAt: now, LeaseUntil: now.Add(time.Hour), UpdatedAt: now}
			if intent != "open" {
				rec.State, rec.ExpiresAt = fence.StateDone, now.Add(time.Duration(min)*time.Minute)
				rec.Cert = &fence.Cert{Intent: intent, Tool: "t", Args: []byte("null"), Result: []byte("null"), Hash: "h-" + intent}
			}
			if err := tx.Put(rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	done := []fence.State{fence.StateDone}
	for _, write := range []bool{false, true} {
		run := st.View
		if write {
			run = st.Update
		}
		var problems []string
		err := run(ctx, func(tx fence.Tx) error {
			problems = problems[:0]
			for _, c := range []struct {
				f    fence.Filter
				want []string
			}{
				{fence.Filter{ByExpiry: true, Limit: 3, States: done, ExpiresBefore: now}, []string{"z", "b", "a"}},
				{fence.Filter{ByExpiry: true, Limit: 10, ExpiresBefore: now}, []string{"z", "b", "a", "q", "m"}},
				{fence.Filter{ByExpiry: true, Limit: 10}, []string{"z", "b", "a", "q", "m", "d"}},
				{fence.Filter{ByExpiry: true, Limit: 1, States: []fence.State{fence.StateInFlight}}, nil},
			} {
				var got []string
				if err := tx.Scan(c.f, func(r *fence.Record) bool { got = append(got, r.Intent); return true }); err != nil {
					return err // the store's own (a speculative commit may run fn again)
				}
				if !slices.Equal(got, c.want) {
					problems = append(problems, fmt.Sprintf("%+v (write %v): got %q, want %q", c.f, write, got, c.want))
				}
			}
			for _, f := range []fence.Filter{{ByExpiry: true}, {ByExpiry: true, Limit: 2, After: "a"}} {
				if err := tx.Scan(f, func(*fence.Record) bool { return true }); err == nil {
					problems = append(problems, fmt.Sprintf("%+v (write %v) was not refused", f, write))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
}

func testEvictDomain(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	var last uint64
	for i := 0; i < 3; i++ {
		c := mustCommit(t, eng, mustFresh(t, eng, fence.Request{Intent: fmt.Sprintf("e%d", i), Tool: "t", Domain: "hot"}), `1`)
		last = c.Seq
	}
	if err := eng.EvictDomain(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
	if cur, _ := eng.Current(ctx, "hot"); cur < last {
		t.Fatalf("evicted domain reads %d, below its last seq %d", cur, last)
	}
	c := mustCommit(t, eng, mustFresh(t, eng, fence.Request{Intent: "e-after", Tool: "t", Domain: "hot"}), `1`)
	if c.Seq <= last {
		t.Fatalf("seq %d reused after eviction (last %d)", c.Seq, last)
	}
	if err := eng.EvictDomain(ctx, "never-used"); err != nil {
		t.Fatal(err)
	}
}

func testQueriesNoState(t *testing.T, newStore Factory) {
	st := newStore(t)
	eng := fence.New(st, fence.Config{})
	// A claim whose lease lapsed while its holder lives: Status reports it, it does not judge
	// it (only an attempt, Recover or the holder changes it).
	alive := func(string) fence.Liveness { return fence.Alive }
	short := fence.New(st, fence.Config{Owner: "host/9/9", Liveness: alive, LeaseTTL: 30 * time.Millisecond})
	mustFresh(t, short, req("q:lapsed"))
	time.Sleep(60 * time.Millisecond)
	for i := 0; i < 2; i++ {
		if s, err := short.Status(ctx, "q:lapsed"); err != nil || s.State != fence.StateInFlight {
			t.Fatalf("status of a lapsed claim = %s, %v; want in_flight, unchanged", s.State, err)
		}
	}
	if kinds := eventKinds(t, short, "q:lapsed"); len(kinds) != 0 {
		t.Fatalf("status wrote events: %v", kinds)
	}
	if _, err := short.Clear(ctx, "q:lapsed", "test", "set up for the checks below"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if s, err := eng.Status(ctx, fmt.Sprintf("ghost:%d", i)); err != nil || s.State != fence.StateNone {
			t.Fatalf("status: %+v %v", s, err)
		}
		if _, err := eng.Current(ctx, fmt.Sprintf("dom:%d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Stats(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = st.View(ctx, func(tx fence.Tx) error {
		n := 0
		_ = tx.Scan(fence.Filter{}, func(*fence.Record) bool { n++; return true })
		if n != 0 {
			t.Fatalf("queries created %d records", n)
		}
		for i := 0; i < 5; i++ {
			if _, found, _ := tx.DomainSeq(fmt.Sprintf("dom:%d", i)); found {
				t.Fatalf("query created domain row")
			}
		}
		return nil
	})
}

// orderIntents differ in byte order from a linguistic order (upper case before lower, '_'
// between them, precomposed and combining accents, spaces and hyphens that a linguistic
// collation weighs little, a character beyond the Basic Multilingual Plane).
var orderIntents = []string{"B", "a", "_x", "Z", "é", "e\u0301", "ä", "a b", "a-b", "A", "ab", "aB", "Ä", "~", "0", "\U0001D49C", "\uFFFD", "b"}

// testIntentByteOrder: Scan gives records in the byte order of their intents, as Go compares
// strings and as Filter.After and Match do, whatever the store's own text order (a
// PostgreSQL database's collation); paging with After and Limit visits each record once, in
// that order; and CertByHash's "first in intent order" is the first in byte order.
func testIntentByteOrder(t *testing.T, newStore Factory) {
	st := newStore(t)
	want := slices.Clone(orderIntents)
	sort.Strings(want)
	var open, done []string
	err := st.Update(ctx, func(tx fence.Tx) error {
		now := tx.Now()
		for i, intent := range orderIntents {
			rec := &fence.Record{Intent: intent, State: fence.StateInFlight, Tool: "t", Args: []byte("null"), ClaimedAt: now, LeaseUntil: now.Add(time.Hour), UpdatedAt: now}
			if i%2 == 1 {
				// Done records share one cert hash: a superseded copy keeps its cert, so
				// several done records can have the same one.
				rec.State = fence.StateDone
				rec.Cert = &fence.Cert{Intent: intent, Tool: "t", Args: []byte("null"), Result: []byte("null"), Hash: "shared-hash"}
			}
			if err := tx.Put(rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, intent := range want {
		if i := slices.Index(orderIntents, intent); i%2 == 1 {
			done = append(done, intent)
		} else {
			open = append(open, intent)
		}
	}
	// scan and page return the store's error, not fail on it: a store may end a run of fn
	// with an error of its own and run fn again (PostgreSQL's speculative commit).
	scan := func(tx fence.Tx, f fence.Filter) ([]string, error) {
		var got []string
		err := tx.Scan(f, func(r *fence.Record) bool { got = append(got, r.Intent); return true })
		return got, err
	}
	// page scans from the start, limit records at a time, each page after the last intent the
	// one before gave.
	page := func(tx fence.Tx, f fence.Filter, limit int) ([]string, error) {
		var got []string
		f.Limit = limit
		for pages := 0; pages <= len(orderIntents); pages++ {
			p, err := scan(tx, f)
			if err != nil {
				return nil, err
			}
			got = append(got, p...)
			if len(p) < limit {
				return got, nil
			}
			f.After = p[len(p)-1]
		}
		return got, fmt.Errorf("paging by %d does not end: %q", limit, got)
	}
	for _, write := range []bool{false, true} {
		run := st.View
		if write {
			run = st.Update
		}
		var problems []string
		check := func(what string, want []string, got []string, err error) error {
			if err == nil && !slices.Equal(got, want) {
				problems = append(problems, fmt.Sprintf("%s (write %v):\n got  %q\n want %q (byte order)", what, write, got, want))
			}
			return err
		}
		err := run(ctx, func(tx fence.Tx) error {
			problems = problems[:0]
			got, err := scan(tx, fence.Filter{})
			if err := check("Scan", want, got, err); err != nil {
				return err
			}
			for _, limit := range []int{1, 2, 3} {
				for _, c := range []struct {
					what   string
					states []fence.State
					want   []string
				}{{"all", nil, want}, {"open", []fence.State{fence.StateInFlight}, open}, {"done", []fence.State{fence.StateDone}, done}} {
					got, err := page(tx, fence.Filter{States: c.states}, limit)
					if err := check(fmt.Sprintf("%s records, pages of %d", c.what, limit), c.want, got, err); err != nil {
						return err
					}
				}
			}
			for _, after := range []string{"B", "a", "_", "e", "Z", "é"} {
				var rest []string
				for _, intent := range want {
					if intent > after {
						rest = append(rest, intent)
					}
				}
				got, err := scan(tx, fence.Filter{After: after})
				if err := check(fmt.Sprintf("after %q", after), rest, got, err); err != nil {
					return err
				}
			}
			rec, err := tx.CertByHash("shared-hash")
			if err != nil {
				return err
			}
			if rec == nil || rec.Intent != done[0] {
				got := "none"
				if rec != nil {
					got = fmt.Sprintf("the record of %q", rec.Intent)
				}
				problems = append(problems, fmt.Sprintf("CertByHash (write %v) gave %s, want the record of %q, the first in byte order of %q", write, got, done[0], done))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
}

func testForgedTickets(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("refund:3")
	r.Domain = "acct:3"
	tk := mustFresh(t, eng, r)
	forged := []fence.Ticket{
		{Intent: "refund:3", Token: tk.Token, Nonce: "00000000000000000000000000000000"},
		{Intent: "refund:3", Token: tk.Token + 1, Nonce: tk.Nonce},
		{Intent: "made-up", Token: tk.Token, Nonce: tk.Nonce},
		{},
	}
	for _, f := range forged {
		_, err := eng.Commit(ctx, f, []byte(`"forged"`))
		wantCode(t, err, fence.ErrLeaseLost)
		wantCode(t, eng.Release(ctx, f, "x"), fence.ErrLeaseLost)
	}
	// Edited non-authoritative fields are ignored: the engine uses its own record.
	edited := tk
	edited.Domain, edited.Seq = "acct:999", 77
	c := mustCommit(t, eng, edited, `"refunded"`)
	if c.Domain != "acct:3" || c.Seq != 1 {
		t.Fatalf("cert took the ticket's edited fields: %+v", c)
	}
	st, _ := eng.Status(ctx, "made-up")
	if st.State != fence.StateNone {
		t.Fatal("forged ticket created state")
	}
}

func testDeadOwner(t *testing.T, newStore Factory) {
	st := newStore(t)
	dead := map[string]bool{}
	var mu sync.Mutex
	isDead := func(o string) fence.Liveness {
		mu.Lock()
		defer mu.Unlock()
		if dead[o] {
			return fence.Dead
		}
		return fence.Alive
	}
	a := fence.New(st, fence.Config{Owner: "host/100/1", Liveness: isDead})
	b := fence.New(st, fence.Config{Owner: "host/200/1", Liveness: isDead})
	mustFresh(t, a, req("orphan:1"))
	mustFresh(t, a, req("orphan:2"))
	if _, err := b.Prepare(ctx, req("orphan:1")); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("live owner's claim: %v", err)
	}
	mu.Lock()
	dead["host/100/1"] = true
	mu.Unlock()
	_, err := b.Prepare(ctx, req("orphan:1"))
	var pf fence.PriorFailureError
	if !errors.As(err, &pf) || pf.State != fence.StateUnknown {
		t.Fatalf("dead owner's claim: %v", err)
	}
	n, err := b.Recover(ctx)
	if err != nil || n != 1 {
		t.Fatalf("recover = %d, %v; want 1 (orphan:2)", n, err)
	}
	if s, _ := b.Status(ctx, "orphan:2"); s.State != fence.StateUnknown {
		t.Fatalf("orphan:2 state = %s", s.State)
	}
	if _, err := b.Clear(ctx, "orphan:1", "ops", "no charge found"); err != nil {
		t.Fatal(err)
	}
	mustFresh(t, b, req("orphan:1"))
}

func testCoalescing(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("coalesce:1")
	tk := mustFresh(t, eng, r)
	const n = 8
	var wg sync.WaitGroup
	hashes := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			adm, err := eng.PrepareWait(ctx, r, 5*time.Second)
			if err != nil || adm.Fresh() {
				t.Errorf("waiter %d: %+v %v", i, adm, err)
				return
			}
			hashes[i] = adm.Cert.Hash
		}(i)
	}
	time.Sleep(100 * time.Millisecond)
	c := mustCommit(t, eng, tk, `"charged once"`)
	wg.Wait()
	for i, h := range hashes {
		if h != c.Hash {
			t.Fatalf("waiter %d got %q, want %q", i, h, c.Hash)
		}
	}
	// A waiter that started so late that the commit was already there replays directly; on a
	// loaded machine that can happen, so only the sum is exact.
	s, _ := eng.Stats(ctx)
	if s.SinceBoot.Coalesced+s.SinceBoot.Replayed != n || s.SinceBoot.Coalesced == 0 {
		t.Fatalf("coalesced %d + replayed %d, want %d with at least one coalesced", s.SinceBoot.Coalesced, s.SinceBoot.Replayed, n)
	}
	// A waiter whose holder releases gets the intent itself.
	r2 := req("coalesce:2")
	tk2 := mustFresh(t, eng, r2)
	got := make(chan fence.Admission, 1)
	go func() {
		adm, err := eng.PrepareWait(ctx, r2, 5*time.Second)
		if err != nil {
			t.Errorf("waiter after release: %v", err)
		}
		got <- adm
	}()
	time.Sleep(20 * time.Millisecond)
	if err := eng.Release(ctx, tk2, "declined"); err != nil {
		t.Fatal(err)
	}
	if adm := <-got; !adm.Fresh() {
		t.Fatalf("waiter after release did not get the intent: %+v", adm)
	}
	// A waiter gives up after its wait and is told in flight.
	r3 := req("coalesce:3")
	mustFresh(t, eng, r3)
	_, err := eng.PrepareWait(ctx, r3, 30*time.Millisecond)
	wantCode(t, err, fence.ErrInFlight)
}

func testCounters(t *testing.T, newStore Factory) {
	st := newStore(t)
	eng := fence.New(st, fence.Config{})
	tk := mustFresh(t, eng, req("k1"))                            // admitted
	_, _ = eng.Prepare(ctx, req("k1"))                            // in flight
	mustCommit(t, eng, tk, `1`)                                   //
	_, _ = eng.Prepare(ctx, req("k1"))                            // replayed
	bad := req("k1")                                              //
	bad.Args = []byte(`{"amount":1}`)                             //
	_, _ = eng.Prepare(ctx, bad)                                  // conflict
	tk2 := mustFresh(t, eng, req("k2"))                           // admitted
	_ = eng.Abort(ctx, tk2, "?")                                  //
	_, _ = eng.Prepare(ctx, req("k2"))                            // prior failure
	_, _ = eng.Prepare(ctx, fence.Request{Intent: "", Tool: "t"}) // invalid: not an attempt
	stale := fence.Request{Intent: "k3", Tool: "t", ReadSet: []fence.ReadSetEntry{{Domain: "z", Seq: 9}}}
	_, _ = eng.Prepare(ctx, stale) // stale
	s, err := eng.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fence.Counters{Admitted: 2, Replayed: 1, InFlight: 1, Conflict: 1, PriorFailure: 1, Stale: 1}
	if s.SinceBoot != want {
		t.Fatalf("since boot = %+v, want %+v", s.SinceBoot, want)
	}
	if s.SinceBoot.Total() != 7 || s.SinceBoot.Prevented() != 5 {
		t.Fatalf("total %d prevented %d", s.SinceBoot.Total(), s.SinceBoot.Prevented())
	}
	if s.Ledger != want {
		t.Fatalf("ledger view = %+v, want %+v", s.Ledger, want)
	}
	if err := eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A second engine on the same store sees the flushed totals.
	other := fence.New(st, fence.Config{})
	s2, _ := other.Stats(ctx)
	if s2.Ledger != want || !s2.SinceBoot.IsZero() {
		t.Fatalf("other engine: %+v", s2)
	}
	line := s.Line()
	if line != "effectfence since boot: admitted=2 replayed=1 refused(stale=1 race=0 in-flight=1 failed=1 conflict=1) total=7 prevented=5" {
		t.Fatalf("line = %q", line)
	}
}

func testInvalid(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	long := make([]byte, fence.MaxIntentLen+1)
	for i := range long {
		long[i] = 'x'
	}
	cases := []fence.Request{
		{Intent: "", Tool: "t"},
		{Intent: string(long), Tool: "t"},
		{Intent: "bad-args", Tool: "t", Args: []byte(`{"a":`)},
		{Intent: "bad-utf8\xff", Tool: "t"},
		{Intent: "bad-read-set", Tool: "t", ReadSet: []fence.ReadSetEntry{{Domain: ""}}},
		// Text the store would record as U+FFFD (or PostgreSQL refuse as a ledger error).
		{Intent: "bad-agent", Tool: "t", Agent: "a\xff"},
		{Intent: "bad-domain", Tool: "t", Domain: "d\xfe"},
		{Intent: "bad-parent", Tool: "t", Parent: "p\xfd"},
		// A parent is a cert's hash: ledger verify fails a cert whose parent is anything
		// else, so one admitted and certified made every verify of the ledger fail.
		{Intent: "parent-not-a-hash", Tool: "t", Parent: "order-123"},
		{Intent: "parent-in-capitals", Tool: "t", Parent: strings.Repeat("AB", 32)},
		{Intent: "parent-too-short", Tool: "t", Parent: strings.Repeat("ab", 31)},
		{Intent: "bad-read-set-domain", Tool: "t", ReadSet: []fence.ReadSetEntry{{Domain: "d\xff"}}},
		{Intent: "bad-clock", Tool: "t", Clock: fence.VectorClock{"k\xff": 1}},
		// A NUL (PostgreSQL text cannot hold one) or a domain longer than PostgreSQL's index
		// key limit would be a ledger error there and a record elsewhere: refused everywhere.
		{Intent: "nul\x00intent", Tool: "t"},
		{Intent: "nul-domain", Tool: "t", Domain: "d\x00"},
		{Intent: "nul-read-set-domain", Tool: "t", ReadSet: []fence.ReadSetEntry{{Domain: "\x00"}}},
		{Intent: "long-domain", Tool: "t", Domain: strings.Repeat("d", fence.MaxDomainLen+1)},
		{Intent: "long-read-set-domain", Tool: "t", ReadSet: []fence.ReadSetEntry{{Domain: strings.Repeat("d", fence.MaxDomainLen+1)}}},
	}
	for _, r := range cases {
		_, err := eng.Prepare(ctx, r)
		if !errors.Is(err, fence.ErrInvalid) || fence.CodeOf(err) != fence.CodeInvalid {
			t.Errorf("%q: err = %v, want invalid", r.Intent, err)
		}
	}
	tk := mustFresh(t, eng, req("bad-result"))
	_, err := eng.Commit(ctx, tk, []byte(`{not json`))
	wantCode(t, err, fence.ErrInvalid)
	mustCommit(t, eng, tk, `"still holds"`) // an invalid result changed nothing
}

func testParentAndVerify(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	parent := mustCommit(t, eng, mustFresh(t, eng, req("p")), `"p"`)
	child := req("c")
	child.Parent = parent.Hash
	c := mustCommit(t, eng, mustFresh(t, eng, child), `"c"`)
	if c.Parent != parent.Hash {
		t.Fatalf("parent = %q", c.Parent)
	}
	var found *fence.Record
	_ = eng.Store().View(ctx, func(tx fence.Tx) error {
		var err error
		found, err = tx.CertByHash(parent.Hash)
		return err
	})
	if found == nil || found.Intent != "p" {
		t.Fatalf("CertByHash(parent) = %+v", found)
	}
	// Several records with that cert (a superseded copy keeps its cert): the first done one in
	// intent order, whatever else carries it.
	rec, err := eng.Status(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	err = eng.Store().Update(ctx, func(tx fence.Tx) error {
		for _, c := range []struct {
			intent string
			state  fence.State
		}{{"p~copy", fence.StateDone}, {"0-failed", fence.StateFailed}, {"a-copy", fence.StateDone}} {
			r := rec
			r.Intent, r.State = c.intent, c.state
			if err := tx.Put(&r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = eng.Store().View(ctx, func(tx fence.Tx) error {
		var err error
		found, err = tx.CertByHash(parent.Hash)
		return err
	})
	if found == nil || found.Intent != "a-copy" || found.State != fence.StateDone {
		t.Fatalf("CertByHash(parent) with copies = %+v, want a-copy's done record", found)
	}
	tampered := *c
	tampered.Result = []byte(`"c2"`)
	if tampered.Verify() == nil {
		t.Fatal("tampered cert verifies")
	}
}

// RunDurable checks what a durable store adds: a new process (a new engine over a reopened
// store, with a different owner) replays what ran, fences what was in flight when its owner
// died, and keeps counters, tokens, sequences and the domain floor; and that queries leave it
// as it was.
func RunDurable(t *testing.T, reopen Reopener) {
	t.Run("QueriesLeaveTheLedgerAsItWas", func(t *testing.T) { runDurableQueries(t, reopen) })
	t.Run("ReadSetCheckedAtCommitAcrossRestart", func(t *testing.T) { runDurableStaleAcrossRestart(t, reopen) })
	open := reopen(t)
	st1 := open()
	e1 := fence.New(st1, fence.Config{Owner: "host/1/1", Liveness: func(string) fence.Liveness { return fence.Alive }})
	r := req("durable:done")
	r.Domain = "acct"
	done := mustCommit(t, e1, mustFresh(t, e1, r), `{"charge":"ch_42"}`)
	inflight := mustFresh(t, e1, req("durable:inflight"))
	ab := mustFresh(t, e1, req("durable:aborted"))
	if err := e1.Abort(ctx, ab, "timeout"); err != nil {
		t.Fatal(err)
	}
	// An evicted domain: its floor must outlive the process.
	var evicted uint64
	for i := 0; i < 3; i++ {
		evicted = mustCommit(t, e1, mustFresh(t, e1, fence.Request{Intent: fmt.Sprintf("durable:evicted:%d", i), Tool: "t", Domain: "evicted"}), `1`).Seq
	}
	if err := e1.EvictDomain(ctx, "evicted"); err != nil {
		t.Fatal(err)
	}
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := open()
	defer st2.Close()
	e2 := fence.New(st2, fence.Config{Owner: "host/2/1", Liveness: func(o string) fence.Liveness {
		if o == "host/1/1" {
			return fence.Dead
		}
		return fence.Alive
	}})
	adm, err := e2.Prepare(ctx, r)
	if err != nil || adm.Fresh() || adm.Cert.Hash != done.Hash || string(adm.Cert.Result) != `{"charge":"ch_42"}` {
		t.Fatalf("after reopen, duplicate = %+v %v; want replay of %s", adm, err, done.Hash)
	}
	if err := adm.Cert.Verify(); err != nil {
		t.Fatal(err)
	}
	n, err := e2.Recover(ctx)
	if err != nil || n != 1 {
		t.Fatalf("recover = %d, %v", n, err)
	}
	_, err = e2.Prepare(ctx, req("durable:inflight"))
	var pf fence.PriorFailureError
	if !errors.As(err, &pf) || pf.State != fence.StateUnknown {
		t.Fatalf("in flight at crash: %v", err)
	}
	_, err = e2.Prepare(ctx, req("durable:aborted"))
	wantCode(t, err, fence.ErrPriorFailure)
	// Its holder's outcome, kept in a spool across the crash, heals it at the next start.
	if c := mustCommit(t, e2, inflight, `1`); string(c.Result) != `1` {
		t.Fatalf("healing commit: %+v", c)
	}
	if _, err := e2.Commit(ctx, ab, []byte(`1`)); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("commit after abort: %v, want lease_lost (an aborted claim is not healed)", err)
	}
	if cur, err := e2.Current(ctx, "evicted"); err != nil || cur < evicted {
		t.Fatalf("after reopen, evicted domain reads %d, %v; its certs carry up to %d", cur, err, evicted)
	}
	if tk := mustFresh(t, e2, fence.Request{Intent: "durable:evicted:next", Tool: "t", Domain: "evicted"}); tk.Seq <= evicted {
		t.Fatalf("after reopen, evicted domain handed out %d again (its certs carry up to %d)", tk.Seq, evicted)
	}
	tk := mustFresh(t, e2, fence.Request{Intent: "durable:next", Tool: "t", Domain: "acct"})
	if tk.Seq != 2 || tk.Token <= inflight.Token {
		t.Fatalf("sequence or token restarted: %+v", tk)
	}
	s, _ := e2.Stats(ctx)
	if s.Ledger.Admitted < 3 {
		t.Fatalf("ledger counters lost on reopen: %+v", s.Ledger)
	}
}

// testPanicRollback: a transaction function that panics (the engine calls the configured
// Liveness inside transactions; a caller may recover and go on) leaves none of its writes,
// whether the store turns the panic into an error or lets it through, and the store goes on
// deciding. (The memory store kept them: half a transaction.)
func testPanicRollback(t *testing.T, newStore Factory) {
	st := newStore(t)
	var err error
	panicked := func() (p any) {
		defer func() { p = recover() }()
		err = st.Update(ctx, func(tx fence.Tx) error {
			now := tx.Now()
			if err := tx.Put(&fence.Record{Intent: "panicked", State: fence.StateInFlight, Tool: "t", Args: []byte("null"), ClaimedAt: now, LeaseUntil: now, UpdatedAt: now}); err != nil {
				return err
			}
			if err := tx.SetDomainSeq("panicked", 9); err != nil {
				return err
			}
			if err := tx.AppendEvent(fence.Event{At: now, Intent: "panicked", Kind: fence.EventClear}); err != nil {
				return err
			}
			if err := tx.AddCounters(fence.Counters{Admitted: 1}); err != nil {
				return err
			}
			panic("liveness check exploded")
		})
		return nil
	}()
	if panicked == nil && err == nil {
		t.Fatal("Update of a panicking function returned nil")
	}
	err = st.View(ctx, func(tx fence.Tx) error {
		rec, err := tx.Get("panicked")
		if err != nil {
			return err
		}
		_, found, err := tx.DomainSeq("panicked")
		if err != nil {
			return err
		}
		c, err := tx.Counters()
		if err != nil {
			return err
		}
		events := 0
		if err := tx.Events("panicked", func(fence.Event) bool { events++; return true }); err != nil {
			return err
		}
		if rec != nil || found || !c.IsZero() || events != 0 {
			t.Errorf("a panicked update left writes: rec=%v domain=%v counters=%+v events=%d", rec, found, c, events)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eng := fence.New(st, fence.Config{})
	r := req("after-panic")
	c := mustCommit(t, eng, mustFresh(t, eng, r), `{"ok":true}`)
	adm, err := eng.Prepare(ctx, r)
	if err != nil || adm.Fresh() || adm.Cert.Hash != c.Hash {
		t.Fatalf("after the panic the store does not decide: %+v %v", adm, err)
	}
}

// An Update whose function ends its goroutine (runtime.Goexit, which t.FailNow calls inside a
// test's transaction) never returns, writes nothing, and leaves nothing behind: no lock (of
// the store, or of the rows it wrote), no connection inside a transaction, no leader that will
// never hand on. A View, an Update of the same intent and Close each return within a few
// seconds. (A store that fails here may also hang in the Close of its cleanup; -v shows this
// test's failure as it happens.)
func testGoexitUpdate(t *testing.T, newStore Factory) {
	st := newStore(t)
	put := func(tx fence.Tx, seq uint64) error {
		if _, err := tx.Get("exited"); err != nil { // a read first, as the engine does: a store may lock the intent for it
			return err
		}
		now := tx.Now()
		if err := tx.Put(&fence.Record{Intent: "exited", State: fence.StateInFlight, Tool: "t", Args: []byte("null"), ClaimedAt: now, LeaseUntil: now, UpdatedAt: now}); err != nil {
			return err
		}
		return tx.SetDomainSeq("exited", seq)
	}
	returned := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		returned <- st.Update(ctx, func(tx fence.Tx) error {
			if err := put(tx, 9); err != nil {
				return err
			}
			runtime.Goexit()
			return nil
		})
	}()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the goroutine whose transaction function called runtime.Goexit did not end")
	}
	select {
	case err := <-returned:
		t.Fatalf("Update returned (%v) on a goroutine that its function ended", err)
	default:
	}
	// within runs call with a deadline, so that a store left locked fails the test.
	within := func(what string, call func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s after an Update whose function called runtime.Goexit: %v", what, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s after an Update whose function called runtime.Goexit did not return within 5 s: the store kept a lock, a connection or a leader", what)
		}
	}
	written := func(tx fence.Tx) (rec *fence.Record, seq uint64, found bool, err error) {
		if rec, err = tx.Get("exited"); err != nil {
			return
		}
		seq, found, err = tx.DomainSeq("exited")
		return
	}
	within("a View", func() error {
		return st.View(ctx, func(tx fence.Tx) error {
			rec, _, found, err := written(tx)
			if err == nil && (rec != nil || found) {
				t.Errorf("an Update whose function called runtime.Goexit left writes: rec=%v domain=%v", rec, found)
			}
			return err
		})
	})
	within("an Update of the same intent", func() error {
		return st.Update(ctx, func(tx fence.Tx) error { return put(tx, 1) })
	})
	within("a View", func() error {
		return st.View(ctx, func(tx fence.Tx) error {
			rec, seq, found, err := written(tx)
			if err == nil && (rec == nil || !found || seq != 1) {
				t.Errorf("the Update after it returned nil but its writes are not there: rec=%v domain=%v seq=%d", rec, found, seq)
			}
			return err
		})
	})
	// Close waits for nothing left behind either (a connection never given back, say).
	within("Close", st.Close)
}

func testRollback(t *testing.T, newStore Factory) {
	st := newStore(t)
	boom := errors.New("boom")
	err := st.Update(ctx, func(tx fence.Tx) error {
		now := tx.Now()
		if err := tx.Put(&fence.Record{Intent: "rolled-back", State: fence.StateInFlight, Tool: "t", Args: []byte("null"), ClaimedAt: now, LeaseUntil: now, UpdatedAt: now}); err != nil {
			return err
		}
		if err := tx.SetDomainSeq("rolled-back", 9); err != nil {
			return err
		}
		if err := tx.SetDomainFloor(5); err != nil {
			return err
		}
		if err := tx.AppendEvent(fence.Event{At: now, Intent: "rolled-back", Kind: fence.EventClear}); err != nil {
			return err
		}
		if err := tx.AddCounters(fence.Counters{Admitted: 1}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want fn's error", err)
	}
	_ = st.View(ctx, func(tx fence.Tx) error {
		rec, _ := tx.Get("rolled-back")
		seq, found, _ := tx.DomainSeq("rolled-back")
		floor, _ := tx.DomainFloor()
		c, _ := tx.Counters()
		events := 0
		_ = tx.Events("rolled-back", func(fence.Event) bool { events++; return true })
		if rec != nil || found || seq != 0 || floor != 0 || !c.IsZero() || events != 0 {
			t.Fatalf("failed update left writes: rec=%v domain=%v/%d floor=%d counters=%+v events=%d", rec, found, seq, floor, c, events)
		}
		return nil
	})
	// A write in View is refused or has no effect.
	_ = st.View(ctx, func(tx fence.Tx) error {
		_ = tx.SetDomainSeq("view-write", 1)
		return nil
	})
	_ = st.View(ctx, func(tx fence.Tx) error {
		if _, found, _ := tx.DomainSeq("view-write"); found {
			t.Fatal("a write inside View took effect")
		}
		return nil
	})
}

// viewCounter is a store that counts its reads: a test tells by it that an engine has asked.
type viewCounter struct {
	fence.Store
	views atomic.Int64
}

func (v *viewCounter) View(ctx context.Context, fn func(fence.Tx) error) error {
	err := v.Store.View(ctx, fn)
	v.views.Add(1)
	return err
}

// testFailureSharedAcrossProcesses: SPEC §6 gives the waiters of an attempt that fails
// definitely that same failure. Two engines on one store (two processes on one ledger):
// while the first holds the intent, the second's PrepareWait waits on it; the holder reports
// OutcomeFailure, and the waiter gets FailedWaitError with the holder's reason, holding
// nothing (its claim given up as not run). The intent is free: the next attempt runs.
// A plain release (the call did not run) is no failure: a waiter on it runs the call.
func testFailureSharedAcrossProcesses(t *testing.T, newStore Factory) {
	st := newStore(t)
	holder := fence.New(st, fence.Config{Owner: "a/1/1", Liveness: cannotTell})
	counted := &viewCounter{Store: st}
	waiter := fence.New(counted, fence.Config{Owner: "b/1/1", Liveness: cannotTell})
	for _, failure := range []bool{true, false} {
		r := req(fmt.Sprintf("shared:failure:%v", failure))
		tk := mustFresh(t, holder, r)
		type answer struct {
			adm fence.Admission
			err error
		}
		got := make(chan answer, 1)
		before := counted.views.Load()
		go func() {
			adm, err := waiter.PrepareWait(ctx, r, 20*time.Second)
			got <- answer{adm, err}
		}()
		for counted.views.Load() == before { // the waiter found the intent held
			time.Sleep(time.Millisecond)
		}
		kind, reason := fence.OutcomeFailure, "the tool answered isError: card declined"
		if !failure {
			kind, reason = fence.OutcomeRelease, "never sent"
		}
		if _, err := holder.Settle(ctx, fence.Outcome{Kind: kind, Ticket: tk, Reason: reason}); err != nil {
			t.Fatal(err)
		}
		a := <-got
		if !failure {
			if a.err != nil || !a.adm.Fresh() {
				t.Fatalf("a waiter on an attempt released as not run: %+v %v; want it admitted to run", a.adm, a.err)
			}
			mustCommit(t, waiter, *a.adm.Ticket, `"ran"`)
			continue
		}
		var fw fence.FailedWaitError
		if !errors.As(a.err, &fw) || fw.Token != tk.Token || fw.Reason != reason || a.adm.Fresh() || fence.CodeOf(a.err) != fence.CodeFailedWait {
			t.Fatalf("a waiter in another process on an attempt that failed: %+v %v; want FailedWaitError of claim %d saying %q", a.adm, a.err, tk.Token, reason)
		}
		if rec, err := holder.Status(ctx, r.Intent); err != nil || rec.State != fence.StateNone {
			t.Fatalf("the intent after the failure was shared: %s %v; want it free", rec.State, err)
		}
		next := mustFresh(t, holder, r)
		mustCommit(t, holder, next, `"ran"`)
	}
}

// pausable is a store whose reads and writes wait while it is paused: a test holds one
// engine's next look at the ledger (a waiter's next poll) until others have moved on.
type pausable struct {
	fence.Store
	mu      sync.Mutex
	gate    chan struct{} // while not nil, every read and write waits for it to close
	blocked atomic.Int64  // how many wait at the gate now
	looks   atomic.Int64  // how many reads and writes have ended
	// pauseAfterWrite: the looks after the next write wait (a waiter's claim, then held).
	pauseAfterWrite atomic.Bool
}

func (p *pausable) wait() {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	if g != nil {
		p.blocked.Add(1)
		<-g
		p.blocked.Add(-1)
	}
}

func (p *pausable) View(ctx context.Context, fn func(fence.Tx) error) error {
	p.wait()
	defer p.looks.Add(1)
	return p.Store.View(ctx, fn)
}

func (p *pausable) Update(ctx context.Context, fn func(fence.Tx) error) error {
	p.wait()
	defer p.looks.Add(1)
	err := p.Store.Update(ctx, fn)
	if p.pauseAfterWrite.CompareAndSwap(true, false) {
		p.mu.Lock()
		p.gate = make(chan struct{})
		p.mu.Unlock()
	}
	return err
}

// held waits until a look waits at the gate set after a write (pauseAfterWrite), and returns
// what opens it.
func (p *pausable) held(t *testing.T) (resume func()) {
	t.Helper()
	for p.blocked.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	p.mu.Lock()
	g := p.gate
	p.gate = nil
	p.mu.Unlock()
	return func() { close(g) }
}

// pause holds every look that starts from now on, and returns once one waits (the engine
// using this store has no look under way: it is a single waiter's PrepareWait).
func (p *pausable) pause(t *testing.T) (resume func()) {
	t.Helper()
	g := make(chan struct{})
	p.mu.Lock()
	p.gate = g
	p.mu.Unlock()
	for p.blocked.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	return func() {
		p.mu.Lock()
		p.gate = nil
		p.mu.Unlock()
		close(g)
	}
}

// testFailureSharedUnseen: a waiter is given the failure of every attempt that ran while it
// waited, not only of the claims it happened to find holding the intent when it looked. A
// waiter in another process looks at the ledger only now and then (polling, or after a
// notification): the claim it saw is released as not run (its agent cancelled it before it
// was sent), and another attempt of the same call claims the intent, runs and fails
// definitely, all before the waiter looks again. In the holder's process the waiters of
// that attempt are given its failure (wrap's flights); before, the waiter in another process
// found the intent free, its look having missed the failed claim, and ran the call again: a
// second execution decided by when it polled.
func testFailureSharedUnseen(t *testing.T, newStore Factory) {
	st := newStore(t)
	holder := fence.New(st, fence.Config{Owner: "a/1/1", Liveness: cannotTell})
	paused := &pausable{Store: st}
	waiter := fence.New(paused, fence.Config{Owner: "b/1/1", Liveness: cannotTell})
	r := req("shared:failure:unseen")
	first := mustFresh(t, holder, r)
	got := waitInBackground(waiter, r)
	for paused.looks.Load() == 0 { // the waiter found the intent held by the first claim
		time.Sleep(time.Millisecond)
	}
	resume := paused.pause(t)
	if _, err := holder.Settle(ctx, fence.Outcome{Kind: fence.OutcomeRelease, Ticket: first, Reason: "the call was cancelled by its agent before it was sent"}); err != nil {
		t.Fatal(err)
	}
	second := mustFresh(t, holder, r)
	const why = "the tool answered isError: a definite failure"
	if _, err := holder.Settle(ctx, fence.Outcome{Kind: fence.OutcomeFailure, Ticket: second, Reason: why}); err != nil {
		t.Fatal(err)
	}
	resume()
	a := <-got
	var fw fence.FailedWaitError
	if !errors.As(a.err, &fw) || fw.Token != second.Token || fw.Reason != why || a.adm.Fresh() {
		t.Fatalf("a waiter whose looks missed the claim that failed while it waited: %+v %v; want FailedWaitError of claim %d", a.adm, a.err, second.Token)
	}
	if rec, err := holder.Status(ctx, r.Intent); err != nil || rec.State != fence.StateNone {
		t.Fatalf("the intent after the failure was shared: %s %v; want it free", rec.State, err)
	}
	// A call that comes after the failure is a retry, not a waiter: it runs.
	next, err := waiter.PrepareWait(ctx, r, time.Second)
	if err != nil || !next.Fresh() {
		t.Fatalf("a retry after the failure: %+v %v; want it admitted", next, err)
	}
	mustCommit(t, waiter, *next.Ticket, `"ran"`)
}

// eventsFail is a store whose audit trail cannot be read once armed: each read of it fails
// as a connection that drops does.
type eventsFail struct {
	fence.Store
	armed atomic.Bool
	tries atomic.Int64
}

type eventsFailTx struct {
	fence.Tx
	s *eventsFail
}

func (tx eventsFailTx) Events(string, func(fence.Event) bool) error {
	tx.s.tries.Add(1)
	return errors.New("read events: connection reset by peer")
}

func (s *eventsFail) View(ctx context.Context, fn func(fence.Tx) error) error {
	if !s.armed.Load() {
		return s.Store.View(ctx, fn)
	}
	return s.Store.View(ctx, func(tx fence.Tx) error { return fn(eventsFailTx{tx, s}) })
}

// testFailureUnreadable: a waiter admitted after waiting must learn whether the attempt it
// waited for failed (sharedFailure) before it may run; when the ledger does not let it read
// that, it does not run (SPEC §3: every error means do not run), its claim is given up and
// the intent is free. Before, a read that failed left the claim standing and the call ran,
// though the attempt it waited for had failed: a second execution on a ledger's hiccup.
func testFailureUnreadable(t *testing.T, newStore Factory) {
	st := newStore(t)
	holder := fence.New(st, fence.Config{Owner: "a/1/1", Liveness: cannotTell})
	flaky := &eventsFail{Store: st}
	counted := &viewCounter{Store: flaky}
	waiter := fence.New(counted, fence.Config{Owner: "b/1/1", Liveness: cannotTell})
	r := req("shared:failure:unreadable")
	tk := mustFresh(t, holder, r)
	got := waitInBackground(waiter, r)
	for counted.views.Load() == 0 { // the waiter found the intent held
		time.Sleep(time.Millisecond)
	}
	flaky.armed.Store(true)
	if _, err := holder.Settle(ctx, fence.Outcome{Kind: fence.OutcomeFailure, Ticket: tk, Reason: "the tool answered isError: a definite failure"}); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err == nil || a.adm.Fresh() || flaky.tries.Load() == 0 || fence.CodeOf(a.err) != fence.CodeStore {
		t.Fatalf("a waiter that could not read whether the attempt it waited for failed: %+v %v; want a store error, not run", a.adm, a.err)
	}
	flaky.armed.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := holder.Status(ctx, r.Intent)
		if err == nil && rec.State == fence.StateNone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter's claim after it did not run: %s %v; want it given up, the intent free", rec.State, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	next := mustFresh(t, holder, r)
	mustCommit(t, holder, next, `"ran"`)
}

// testRetryAfterSharedFailure: a call that comes after an attempt failed is a retry, and runs
// (SPEC §6: the intent is released, a retry may run), also when it finds the intent held for a
// moment by a waiter of the failed attempt, which claims it only to give it up (sharedFailure).
// That claim ran nothing: its end is a release, not a failure of its own. Before, it was
// recorded as a failure, so the retry, which waited on it, was told "the call you waited for
// failed" and did not run.
func testRetryAfterSharedFailure(t *testing.T, newStore Factory) {
	st := newStore(t)
	holder := fence.New(st, fence.Config{Owner: "a/1/1", Liveness: cannotTell})
	paused := &pausable{Store: st}
	waiter := fence.New(paused, fence.Config{Owner: "b/1/1", Liveness: cannotTell})
	counted := &viewCounter{Store: st}
	retry := fence.New(counted, fence.Config{Owner: "c/1/1", Liveness: cannotTell})
	r := req("shared:failure:retry")
	tk := mustFresh(t, holder, r)
	type answer struct {
		adm fence.Admission
		err error
	}
	waited, retried := make(chan answer, 1), make(chan answer, 1)
	go func() {
		adm, err := waiter.PrepareWait(ctx, r, 20*time.Second)
		waited <- answer{adm, err}
	}()
	for paused.looks.Load() == 0 { // the waiter found the intent held by the attempt
		time.Sleep(time.Millisecond)
	}
	paused.pauseAfterWrite.Store(true)
	const why = "the tool answered isError: a definite failure"
	if _, err := holder.Settle(ctx, fence.Outcome{Kind: fence.OutcomeFailure, Ticket: tk, Reason: why}); err != nil {
		t.Fatal(err)
	}
	resume := paused.held(t) // the waiter claimed the intent, and has yet to give it up
	go func() {
		adm, err := retry.PrepareWait(ctx, r, 20*time.Second)
		retried <- answer{adm, err}
	}()
	for counted.views.Load() == 0 { // the retry found the intent held by the waiter's claim
		time.Sleep(time.Millisecond)
	}
	resume()
	w := <-waited
	var fw fence.FailedWaitError
	if !errors.As(w.err, &fw) || fw.Token != tk.Token || w.adm.Fresh() {
		t.Fatalf("the waiter of the attempt that failed: %+v %v; want FailedWaitError of claim %d", w.adm, w.err, tk.Token)
	}
	a := <-retried
	if a.err != nil || !a.adm.Fresh() {
		t.Fatalf("a retry after the failure, which found the waiter's claim: %+v %v; want it admitted to run", a.adm, a.err)
	}
	mustCommit(t, retry, *a.adm.Ticket, `"ran"`)
}

// testFailureSharedAfterAskingAgain: a call that asks the ledger again after a refusal is the
// same call, still a waiter of the claim it first waited on (fence.Waited). It waited on a
// claim of another process whose lease lapsed: refused, the intent unknown. The holder's late
// failure then healed the claim, DrainedFor says to ask again, and the call, asking with what
// its wait learned, is given that failure and runs nothing. Before, the second ask knew
// nothing of the first's wait, found the intent free and ran the call a second time (wrap's
// re-asks after DrainedFor and after an elicitation). A call that comes after the failure
// without having waited is a retry, and runs.
func testFailureSharedAfterAskingAgain(t *testing.T, newStore Factory) {
	st := newStore(t)
	const lease = 200 * time.Millisecond
	holder := fence.New(st, fence.Config{Owner: "a/1/1", LeaseTTL: lease, Liveness: cannotTell})
	waiter := fence.New(st, fence.Config{Owner: "b/1/1", LeaseTTL: lease, Liveness: cannotTell})
	r := req("shared:failure:asked-again")
	tk := mustFresh(t, holder, r)
	var w fence.Waited
	// The first ask beside its caller, as wrap's and serve's are: what it learned comes back.
	_, _, err := waiter.PrepareWaitBesideWith(ctx, r, 20*time.Second, nil, 10*time.Second, "not sent", &w)
	var pf fence.PriorFailureError
	if !errors.As(err, &pf) || pf.State != fence.StateUnknown || w.Since() != tk.Token {
		t.Fatalf("a waiter on a claim whose lease lapsed: %v, first claim seen %d; want prior_failure (unknown) having seen claim %d", err, w.Since(), tk.Token)
	}
	const why = "the tool answered isError: a definite failure"
	if _, err := holder.Settle(ctx, fence.Outcome{Kind: fence.OutcomeFailure, Ticket: tk, Reason: why}); err != nil {
		t.Fatalf("the holder's late failure: %v", err)
	}
	if again, err := waiter.DrainedFor(ctx, err); !again || err != nil {
		t.Fatalf("DrainedFor of an unknown healed since: %v %v; want ask again", again, err)
	}
	adm, d, err := waiter.PrepareWaitWith(ctx, r, 20*time.Second, nil, &w)
	waiter.Count(d)
	var fw fence.FailedWaitError
	if !errors.As(err, &fw) || fw.Token != tk.Token || fw.Reason != why || adm.Fresh() {
		t.Fatalf("the waiter asking again after the claim it waited on failed: %+v %v; want FailedWaitError of claim %d", adm, err, tk.Token)
	}
	if rec, err := holder.Status(ctx, r.Intent); err != nil || rec.State != fence.StateNone {
		t.Fatalf("the intent after the failure was shared: %s %v; want it free", rec.State, err)
	}
	var none fence.Waited
	next, _, err := waiter.PrepareWaitWith(ctx, r, time.Second, nil, &none)
	if err != nil || !next.Fresh() {
		t.Fatalf("a retry after the failure, which waited on nothing: %+v %v; want it admitted", next, err)
	}
	mustCommit(t, waiter, *next.Ticket, `"ran"`)
}

// waitAnswer is what a PrepareWait run in the background came to.
type waitAnswer struct {
	adm fence.Admission
	err error
}

// waitInBackground runs eng.PrepareWait of r (waiting up to 20 s) in a goroutine of its own,
// and returns the channel its answer comes on.
func waitInBackground(eng *fence.Engine, r fence.Request) <-chan waitAnswer {
	got := make(chan waitAnswer, 1)
	go func() {
		adm, err := eng.PrepareWait(ctx, r, 20*time.Second)
		got <- waitAnswer{adm, err}
	}()
	return got
}
