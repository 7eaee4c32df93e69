package wrap

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// askSink is an agent that can be asked: it counts the elicitation requests it is sent and
// answers each with cancel, through the proxy's table of pending requests (as Dispatch would).
type askSink struct {
	p     *Proxy
	asked atomic.Int32
}

func (s *askSink) Write(line []byte) error {
	m, err := jsonrpc.Parse(line)
	if err != nil || m.Method != "elicitation/create" {
		return nil
	}
	s.asked.Add(1)
	s.p.pmu.Lock()
	ch := s.p.pending[jsonrpc.IDKey(m.ID)]
	s.p.pmu.Unlock()
	if ch != nil {
		ch <- agentAnswer{m: &jsonrpc.Message{ID: m.ID, Result: []byte(`{"action":"cancel"}`)}}
	}
	return nil
}

// askingProxy is a proxy on eng, writing its log to log, whose agent can be asked (sink).
func askingProxy(t *testing.T, eng *fence.Engine, log io.Writer) (*Proxy, *askSink) {
	t.Helper()
	p, err := New(Options{Backend: func(BackendConfig) Backend { return nopBack{} }, Engine: eng, Log: log, Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	sink := &askSink{p: p}
	p.Attach(sink)
	p.child, p.initDone = nopBack{}, true
	p.elicit.can = true
	return p, sink
}

// A call refused as prior_failure can reach askOnce after the intent was settled: a duplicate
// refused just before another call's question was answered arrives once that question has
// closed. It must not ask the person again; the call goes back through the fenced path. (A
// loaded machine showed it in TestElicitationWithRealSDKClient: "asked 2 times, want 1".)
func TestNoQuestionAboutAnIntentSettledMeanwhile(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer eng.Close()
	p, sink := askingProxy(t, eng, io.Discard)

	req := fence.Request{Intent: "pay:1", Tool: "pay", Args: []byte(`{"amount":1}`)}
	makeUnknown(t, eng, req, "the server died mid-call")
	pf := priorFailure(t, eng, req)

	// While the intent is fenced, the person is asked (here they dismiss the question).
	if got := p.askOnce(ctx, "pay", req.Intent, pf); got != "" || sink.asked.Load() != 1 {
		t.Fatalf("fenced intent: answer %q after %d questions, want none after 1", got, sink.asked.Load())
	}

	// Settled meanwhile (as by another call's answered question): the same stale refusal asks
	// nobody and sends the call back to the ledger.
	if _, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: req.Intent, How: fence.DidNotHappen, Who: "operator", Reason: "checked"}); err != nil {
		t.Fatal(err)
	}
	if got := p.askOnce(ctx, "pay", req.Intent, pf); got != settledMeanwhile || sink.asked.Load() != 1 {
		t.Fatalf("settled intent: answer %q after %d questions, want %q after 1", got, sink.asked.Load(), settledMeanwhile)
	}
}

// An intent that went unknown only because its holder went silent past its lease, while that
// holder still runs on this host (here: this very process), is not asked about: the effect
// may still be under way, so "it did not happen" would be refused and nobody can say it
// happened. Once the holder's late result settles it, the call goes back to the ledger.
func TestNoQuestionWhileTheHolderCanStillSettle(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	clock := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	st := fence.NewMemoryStoreClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return clock })
	eng := fence.New(st, fence.Config{LeaseTTL: time.Second})
	defer eng.Close()
	var log syncbuf.Buffer
	p, sink := askingProxy(t, eng, &log)

	req := fence.Request{Intent: "pay:2", Tool: "pay", Args: []byte(`{"amount":2}`)}
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	mu.Lock()
	clock = clock.Add(time.Minute)
	mu.Unlock()
	_, err = eng.Prepare(ctx, req)
	var pf fence.PriorFailureError
	if !errors.As(err, &pf) {
		t.Fatalf("prepare beside a silent holder: %v, want prior_failure", err)
	}
	if got := p.askOnce(ctx, "pay", req.Intent, pf); got != "" || sink.asked.Load() != 0 {
		t.Fatalf("an intent its live holder can still settle: answer %q after %d questions, want none asked", got, sink.asked.Load())
	}
	if !strings.Contains(log.String(), "the person is not asked") {
		t.Fatalf("the log does not say why nobody was asked:\n%s", log.String())
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"content":[]}`)); err != nil {
		t.Fatalf("the holder's late commit: %v", err)
	}
	if got := p.askOnce(ctx, "pay", req.Intent, pf); got != settledMeanwhile || sink.asked.Load() != 0 {
		t.Fatalf("after the late result: answer %q after %d questions, want %q", got, sink.asked.Load(), settledMeanwhile)
	}
}

// racingSink is an agent whose person answers "it did not happen" about the claim they were
// shown, after, meanwhile, the intent was cleared, claimed again and left unknown once more
// (an operator's clear, or another wrap's person, then a second attempt whose server died).
type racingSink struct {
	p       *Proxy
	between func()
}

func (s *racingSink) Write(line []byte) error {
	m, err := jsonrpc.Parse(line)
	if err != nil || m.Method != "elicitation/create" {
		return nil
	}
	s.between()
	s.p.pmu.Lock()
	ch := s.p.pending[jsonrpc.IDKey(m.ID)]
	s.p.pmu.Unlock()
	if ch != nil {
		ch <- agentAnswer{m: &jsonrpc.Message{ID: m.ID, Result: []byte(`{"action":"accept","content":{"outcome":"did_not_happen"}}`)}}
	}
	return nil
}

// A person's answer is recorded on the claim they were asked about only. Before, it was
// recorded on whatever the intent held when they answered: "it did not happen", said of the
// first attempt, freed a second attempt's unknown outcome (which may have taken effect), and
// the call ran a third time.
func TestAnswerAboutOneAttemptIsNotRecordedOnAnother(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer eng.Close()
	var log syncbuf.Buffer
	p, _ := askingProxy(t, eng, &log)
	req := fence.Request{Intent: "pay:3", Tool: "pay", Args: []byte(`{"amount":3}`)}
	unknown := func() { makeUnknown(t, eng, req, "the server died mid-call") }
	unknown()
	pf := priorFailure(t, eng, req)
	var second uint64
	p.Attach(&racingSink{p: p, between: func() {
		if _, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: req.Intent, How: fence.DidNotHappen, Who: "operator", Reason: "checked"}); err != nil {
			t.Error(err)
		}
		unknown()
		rec, err := eng.Status(ctx, req.Intent)
		if err != nil {
			t.Error(err)
		}
		second = rec.Token
	}})
	p.askOnce(ctx, "pay", req.Intent, pf)
	rec, err := eng.Status(ctx, req.Intent)
	if err != nil || !rec.State.Fenced() || rec.Token != second {
		t.Fatalf("after an answer about the first attempt: the intent is %s (claim %d, the second attempt's is %d), %v; want the second attempt's unknown outcome still fenced\n%s", rec.State, rec.Token, second, err, log.String())
	}
}

// makeUnknown claims req and aborts the claim with reason: its outcome is unknown.
func makeUnknown(t *testing.T, eng *fence.Engine, req fence.Request, reason string) {
	t.Helper()
	ctx := context.Background()
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if err := eng.Abort(ctx, *adm.Ticket, reason); err != nil {
		t.Fatal(err)
	}
}

// priorFailure is the refusal of req, whose outcome is unknown.
func priorFailure(t *testing.T, eng *fence.Engine, req fence.Request) fence.PriorFailureError {
	t.Helper()
	_, err := eng.Prepare(context.Background(), req)
	var pf fence.PriorFailureError
	if !errors.As(err, &pf) {
		t.Fatalf("prepare of the fenced intent: %v, want prior_failure", err)
	}
	return pf
}

// answerSink is an agent whose person answers every question with result.
type answerSink struct {
	p      *Proxy
	result string
}

func (s *answerSink) Write(line []byte) error {
	m, err := jsonrpc.Parse(line)
	if err != nil || m.Method != "elicitation/create" {
		return nil
	}
	s.p.pmu.Lock()
	ch := s.p.pending[jsonrpc.IDKey(m.ID)]
	s.p.pmu.Unlock()
	if ch != nil {
		ch <- agentAnswer{m: &jsonrpc.Message{ID: m.ID, Result: []byte(s.result)}}
	}
	return nil
}

// The person's answer is read as MCP's SDKs read it: its members spelled so, the last of each.
// A member named so but for case is not it (encoding/json took it, keeping the last: a
// decline followed by "Action":"accept" was recorded as "it did not happen", and the next
// call ran again), nor is an "outcome" spelled otherwise inside the content.
func TestElicitationAnswerIsReadAsTheSDKsReadIt(t *testing.T) {
	for _, c := range []struct {
		answer string
		want   fence.Resolution // "": not recorded, the intent stays fenced
	}{
		{`{"action":"decline","Action":"accept","content":{"outcome":"did_not_happen"}}`, ""},
		{`{"action":"accept","content":{"outcome":"leave_fenced","Outcome":"did_not_happen"}}`, fence.LeaveFenced},
		{`{"action":"accept","Content":{"outcome":"did_not_happen"}}`, ""},
		{`{"action":"accept","content":{"outcome":"did_not_happen"}}`, fence.DidNotHappen},
	} {
		ctx := context.Background()
		eng := fence.New(fence.NewMemoryStore(), fence.Config{})
		var log syncbuf.Buffer
		p, _ := askingProxy(t, eng, &log)
		p.Attach(&answerSink{p: p, result: c.answer})
		req := fence.Request{Intent: "pay:4", Tool: "pay", Args: []byte(`{"amount":4}`)}
		makeUnknown(t, eng, req, "the server died mid-call")
		got := p.askOnce(ctx, "pay", req.Intent, priorFailure(t, eng, req))
		rec, err := eng.Status(ctx, req.Intent)
		if err != nil || got != c.want || rec.State.Fenced() != (c.want != fence.DidNotHappen) {
			t.Errorf("answer %s: recorded %q, the intent %s (%v); want %q\n%s", c.answer, got, rec.State, err, c.want, log.String())
		}
		eng.Close()
	}
}
