package fencetest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// resolveEvents returns the resolve events of an intent.
func resolveEvents(t *testing.T, eng *fence.Engine, intent string) []fence.Event {
	t.Helper()
	var out []fence.Event
	err := eng.Store().View(ctx, func(tx fence.Tx) error {
		return tx.Events(intent, func(ev fence.Event) bool {
			if strings.HasPrefix(ev.Kind, "resolve_") {
				out = append(out, ev)
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// lostIntent claims r and reports it lost: the intent is unknown. It returns the old ticket.
func lostIntent(t *testing.T, eng *fence.Engine, r fence.Request) fence.Ticket {
	t.Helper()
	tk := mustFresh(t, eng, r)
	if err := eng.Lost(ctx, tk, "the MCP server died during the call"); err != nil {
		t.Fatal(err)
	}
	return tk
}

func testResolveHappened(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("resolve:happened")
	old := lostIntent(t, eng, r)
	res, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: r.Intent, How: fence.Happened, Result: json.RawMessage(`{"charge":"ch_9"}`),
		Who: "ops@example", Via: "cli", Reason: "found ch_9 in the bank's dashboard"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Prev.State != fence.StateUnknown || res.Cert == nil || string(res.Cert.Result) != `{"charge":"ch_9"}` {
		t.Fatalf("resolved = %+v", res)
	}
	if err := res.Cert.Verify(); err != nil {
		t.Fatal(err)
	}
	// A duplicate is answered with the recorded result and never runs.
	adm, err := eng.Prepare(ctx, r)
	if err != nil || adm.Fresh() || adm.Cert.Hash != res.Cert.Hash || string(adm.Cert.Result) != `{"charge":"ch_9"}` {
		t.Fatalf("duplicate after happened: %+v, %v", adm, err)
	}
	// The claim that went unknown cannot overwrite the answer; what it reports is kept.
	_, err = eng.Commit(ctx, old, []byte(`{"charge":"ch_late"}`))
	wantCode(t, err, fence.ErrLeaseLost)
	if kinds := eventKinds(t, eng, r.Intent); !contains(kinds, fence.EventLateResult) {
		t.Fatalf("late commit after resolve not audited: %v", kinds)
	}
	evs := resolveEvents(t, eng, r.Intent)
	if len(evs) != 1 || evs[0].Kind != fence.EventResolveHappened || evs[0].Who != "ops@example via cli" ||
		evs[0].State != fence.StateUnknown || !strings.Contains(evs[0].Reason, "ch_9 in the bank") || !strings.Contains(evs[0].Reason, res.Cert.Hash) {
		t.Fatalf("audit = %+v", evs)
	}
	// Resolving it again is refused: it is done.
	_, err = eng.Resolve(ctx, fence.ResolveRequest{Intent: r.Intent, How: fence.DidNotHappen, Who: "ops", Via: "cli", Reason: "second thoughts"})
	wantCode(t, err, fence.ErrNotFenced)
	if s, _ := eng.Status(ctx, r.Intent); s.State != fence.StateDone {
		t.Fatalf("refused resolve changed the state to %s", s.State)
	}
}

func testResolveHappenedPrivacy(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("resolve:private")
	r.Args = []byte(`{"amount":4900,"card":"4242424242424242"}`)
	r.Redact = []string{"card"}
	lostIntent(t, eng, r)
	res, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: r.Intent, How: fence.Happened, Ref: "ch_77",
		Who: "alice", Via: "elicitation:inspector 0.9", Reason: "answered in the conversation"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Cert.Args), "4242") || !strings.Contains(string(res.Cert.Args), fence.Redacted) {
		t.Fatalf("cert args not redacted: %s", res.Cert.Args)
	}
	var tr struct {
		Content []struct{ Text string } `json:"content"`
		Meta    map[string]map[string]string
	}
	if err := json.Unmarshal(res.Cert.Result, &tr); err != nil || len(tr.Content) != 1 ||
		!strings.Contains(tr.Content[0].Text, "Reference: ch_77") || !strings.Contains(tr.Content[0].Text, "alice via elicitation:inspector 0.9") {
		t.Fatalf("default result = %s (%v)", res.Cert.Result, err)
	}
	// A claim that keeps only digests keeps only the digest of the confirmed result too.
	h := req("resolve:hashonly")
	h.KeepResult = fence.KeepHash
	lostIntent(t, eng, h)
	hres, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: h.Intent, How: fence.Happened, Result: json.RawMessage(`{"secret":"s3"}`), Who: "ops", Via: "cli", Reason: "seen"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := hres.Cert.ResultNotKept(); !ok || strings.Contains(string(hres.Cert.Result), "s3") {
		t.Fatalf("hash-only claim kept the result: %s", hres.Cert.Result)
	}
	if !hres.Cert.SameResult([]byte(`{"secret":"s3"}`)) {
		t.Fatal("digest does not bind the result")
	}
}

func testResolveDidNotHappen(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("resolve:not")
	tk := mustFresh(t, eng, r)
	if err := eng.Abort(ctx, tk, "timeout talking to the bank"); err != nil {
		t.Fatal(err)
	}
	_, err := eng.Prepare(ctx, r)
	wantCode(t, err, fence.ErrPriorFailure)
	res, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: r.Intent, How: "did-not-happen", Who: "ops", Via: "cli", Reason: "no charge at the bank"})
	if err != nil || res.Prev.State != fence.StateFailed || res.Cert != nil {
		t.Fatalf("resolve = %+v, %v", res, err)
	}
	next := mustFresh(t, eng, r)
	if next.Token <= tk.Token {
		t.Fatalf("new claim token %d not above %d", next.Token, tk.Token)
	}
	evs := resolveEvents(t, eng, r.Intent)
	if len(evs) != 1 || evs[0].Kind != fence.EventResolveDidNotHappen || evs[0].State != fence.StateFailed || evs[0].Who != "ops via cli" {
		t.Fatalf("audit = %+v", evs)
	}
	// In flight now, held by a live claim: refused.
	_, err = eng.Resolve(ctx, fence.ResolveRequest{Intent: r.Intent, How: fence.Happened, Who: "ops", Via: "cli", Reason: "x"})
	wantCode(t, err, fence.ErrNotFenced)
}

func testResolveLeaveFenced(t *testing.T, newStore Factory) {
	st := newStore(t)
	eng := fence.New(st, fence.Config{})
	r := req("resolve:leave")
	lostIntent(t, eng, r)
	res, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: r.Intent, How: fence.LeaveFenced, Who: "bob", Via: "elicitation:client 1", Reason: "not sure yet"})
	if err != nil || res.Prev.State != fence.StateUnknown {
		t.Fatalf("resolve = %+v, %v", res, err)
	}
	_, err = eng.Prepare(ctx, r)
	wantCode(t, err, fence.ErrPriorFailure)
	// Resolve events outlive a sweep, like clears.
	time.Sleep(20 * time.Millisecond)
	sweeper := fence.New(st, fence.Config{ResultTTL: 10 * time.Millisecond})
	if _, err := sweeper.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if kinds := eventKinds(t, sweeper, r.Intent); strings.Join(kinds, ",") != fence.EventResolveLeaveFenced {
		t.Fatalf("after sweep: events %v, want only %s", kinds, fence.EventResolveLeaveFenced)
	}
}

func testResolveRefusals(t *testing.T, newStore Factory) {
	eng := fence.New(newStore(t), fence.Config{})
	r := req("resolve:refused")
	lostIntent(t, eng, r)
	for _, bad := range []fence.ResolveRequest{
		{Intent: r.Intent, How: fence.Happened, Who: "ops", Reason: " "},
		{Intent: r.Intent, How: "maybe", Who: "ops", Reason: "x"},
		{Intent: r.Intent, How: fence.Happened, Result: json.RawMessage(`{oops`), Who: "ops", Reason: "x"},
		{Intent: r.Intent, How: fence.DidNotHappen, Ref: "ch_1", Who: "ops", Reason: "x"},
		{Intent: r.Intent, How: fence.LeaveFenced, Result: json.RawMessage(`1`), Who: "ops", Reason: "x"},
	} {
		if _, err := eng.Resolve(ctx, bad); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("resolve %+v: %v, want invalid_request", bad, err)
		}
	}
	if evs := resolveEvents(t, eng, r.Intent); len(evs) != 0 {
		t.Fatalf("refused resolves audited: %+v", evs)
	}
	if _, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: "never-seen", How: fence.Happened, Who: "ops", Reason: "x"}); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("absent intent: %v", err)
	}
	d := req("resolve:done")
	mustCommit(t, eng, mustFresh(t, eng, d), `{"ok":true}`)
	_, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: d.Intent, How: fence.Happened, Who: "ops", Reason: "x"})
	var nf fence.NotFencedError
	if !errors.As(err, &nf) || nf.State != fence.StateDone || fence.CodeOf(err) != fence.CodeNotFenced {
		t.Fatalf("done intent: %v", err)
	}
}

// An in-flight claim whose holder died is of unknown outcome: a resolve marks it so (orphan
// event) and answers it.
func testResolveOrphan(t *testing.T, newStore Factory) {
	st := newStore(t)
	dead := func(o string) fence.Liveness {
		if o == "host/100/1" {
			return fence.Dead
		}
		return fence.Alive
	}
	const lease = time.Second
	a := fence.New(st, fence.Config{Owner: "host/100/1", Liveness: dead, LeaseTTL: lease})
	b := fence.New(st, fence.Config{Owner: "host/200/1", Liveness: dead, LeaseTTL: lease})
	r := req("resolve:orphan")
	mustFresh(t, a, r)
	held, err := b.Status(ctx, r.Intent)
	if err != nil {
		t.Fatal(err)
	}
	// Its holder process is gone, but its lease runs: whoever holds the ticket (a serve
	// claim's agent) may still run the effect, so it is not free for the next attempt yet.
	// (On a machine so loaded that the lease lapsed before the answer came, the answer is the
	// resolution itself.)
	res, err := b.Resolve(ctx, fence.ResolveRequest{Intent: r.Intent, How: fence.DidNotHappen, Who: "ops", Via: "cli", Reason: "no charge"})
	if err == nil && time.Now().Before(held.LeaseUntil) {
		t.Fatalf("did-not-happen while the lease of a gone holder runs (until %s): resolved %+v; want not_fenced", held.LeaseUntil, res)
	}
	if err != nil {
		if !errors.Is(err, fence.ErrNotFenced) || !strings.Contains(err.Error(), "lease of claim") {
			t.Fatalf("did-not-happen while the lease of a gone holder runs: %v; want not_fenced naming the lease", err)
		}
		time.Sleep(time.Until(held.LeaseUntil) + 100*time.Millisecond)
		res, err = b.Resolve(ctx, fence.ResolveRequest{Intent: r.Intent, How: fence.DidNotHappen, Who: "ops", Via: "cli", Reason: "no charge"})
	}
	if err != nil || res.Prev.State != fence.StateUnknown {
		t.Fatalf("resolve = %+v, %v", res, err)
	}
	if kinds := eventKinds(t, b, r.Intent); strings.Join(kinds, ",") != "orphan,resolve_did_not_happen" {
		t.Fatalf("events = %v", kinds)
	}
	mustFresh(t, b, r)
}

// docs/RELIABILITY.md: the cert of a "happened" answer has its expiry and replay window
// counted from the answer. An intent that went unknown longer ago than the result TTL (a
// person checks the next morning) and is then answered "happened" replays to duplicates for a
// whole result TTL (and replay window) after the answer; counted from the claim, its outcome
// would be expired at once and the next duplicate would run the effect a second time.
func testResolveHappenedExpiresFromTheAnswer(t *testing.T, newStore Factory) {
	const ttl = 1500 * time.Millisecond // the margin between the answer and the duplicate
	eng := fence.New(newStore(t), fence.Config{ResultTTL: ttl})
	r := req("resolve:next-morning")
	lostIntent(t, eng, r)
	time.Sleep(ttl + 500*time.Millisecond) // unknown for longer than a result TTL
	before := time.Now()
	res, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: r.Intent, How: fence.Happened, Ref: "ch_9", Who: "ops", Via: "cli", Reason: "found ch_9"})
	if err != nil {
		t.Fatal(err)
	}
	windowed := r
	windowed.ReplayWindow = ttl
	for _, dup := range []fence.Request{r, windowed} {
		adm, err := eng.Prepare(ctx, dup)
		if err != nil || adm.Fresh() || adm.Cert.Hash != res.Cert.Hash {
			t.Fatalf("a duplicate right after the answer (replay window %v): %+v, %v; want the answer's cert replayed", dup.ReplayWindow, adm, err)
		}
	}
	s, err := eng.Status(ctx, r.Intent)
	if err != nil || s.State != fence.StateDone || s.ExpiresAt.Before(before.Add(ttl-100*time.Millisecond)) {
		t.Fatalf("after the answer: %+v %v; want done, expiring a result TTL after the answer (%v)", s, err, before)
	}
}
