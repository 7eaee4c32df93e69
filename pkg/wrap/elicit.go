package wrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// Reconciling an unknown outcome in the conversation (docs/RELIABILITY.md, "Resolving an
// unknown outcome"): when a fenced call meets an intent of unknown outcome and the agent
// declared the elicitation capability, wrap asks the person through elicitation/create what
// happened, records the answer with Engine.Resolve, and then answers the call from the
// ledger: a replay (it happened), a run through the normal fenced path (it did not), or
// today's refusal (leave it fenced, decline, cancel, no answer).

// DefaultElicitWait bounds how long wrap waits for the person's answer to an elicitation.
const DefaultElicitWait = 10 * time.Minute

// Keys of the elicitation form.
const (
	ElicitOutcome   = "outcome"
	ElicitReference = "reference"
)

// maxReference bounds the reference a person may give (it becomes part of a replayed result).
const maxReference = 500

// elicitState is what wrap knows about the agent's client and the questions it is asking.
type elicitState struct {
	mu      sync.Mutex
	name    string // clientInfo
	version string
	can     bool                 // the client declared form-mode elicitation
	asks    map[string]*question // by intent: one question per intent at a time
	// settled holds intents the person chose to leave fenced, or declined to answer about:
	// they are not asked again by this process (an agent retrying must not nag them).
	settled map[string]bool
}

// question is one elicitation in progress; the duplicates that meet the same intent wait for
// its answer instead of asking again.
type question struct {
	done   chan struct{}
	answer fence.Resolution // "" when there is no usable answer
}

// noteClient records the client's name, version and elicitation capability from initialize
// params (valid JSON), and returns its name. They are read as MCP's SDKs read them, members
// spelled so (jsonrpc.MemberValue): the TypeScript SDK's server, in wrap's place, asks the
// person only when the client's "capabilities" hold "elicitation" in form mode, and an
// "Elicitation" is none. Before 2026-12-07 encoding/json read them, which also takes a member
// named so but for case and keeps the last: {"elicitation":{},"Elicitation":null} was read as
// no elicitation, {"Elicitation":{}} as form mode (TestElicitationCapabilityIsReadAsTheSDKsReadIt).
// A member of another type counts as absent.
func (p *Proxy) noteClient(params json.RawMessage) string {
	str := func(raw json.RawMessage) string {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	info := jsonrpc.MemberValue(params, "clientInfo")
	name, version := str(jsonrpc.MemberValue(info, "name")), str(jsonrpc.MemberValue(info, "version"))
	e := &p.elicit
	e.mu.Lock()
	e.name, e.version, e.can = name, version, formElicitation(jsonrpc.MemberValue(jsonrpc.MemberValue(params, "capabilities"), "elicitation"))
	e.mu.Unlock()
	return name
}

// formElicitation says whether a client's elicitation capability (nil when none) admits form
// mode, as the TypeScript SDK reads it: an empty object means form mode (MCP 2025-06-18, which
// named no modes), and later revisions name it, "form" holding an object.
func formElicitation(c json.RawMessage) bool {
	if len(c) == 0 || c[0] != '{' {
		return false
	}
	if form := jsonrpc.MemberValue(c, "form"); form != nil {
		return form[0] == '{'
	}
	return c[jsonrpc.SkipSpace(c, 1)] == '}' // no members: form mode; others, none "form": not
}

// via names the channel of an answer in the audit trail: elicitation:<name> <version>.
func (p *Proxy) via() string {
	e := &p.elicit
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.TrimSpace(fmt.Sprintf("elicitation:%s %s", e.name, e.version))
}

type noElicitKey struct{}

// priorFailure is the hook of fencedCall for a refusal. For an intent of unknown outcome it
// reports the intent to the on_unknown hook (once per process), and, when the client can be
// asked and the tool allows it, asks the person; it returns the call's answer and true when
// the answer settled the call, false for today's refusal.
func (p *Proxy) priorFailure(ctx context.Context, tool string, id identity, params json.RawMessage, task bool, err error) (answer, bool) {
	var pf fence.PriorFailureError
	if !errors.As(err, &pf) {
		return answer{}, false
	}
	p.reportUnknown(id.intent, tool, pf.Reason, pf.Token, false)
	p.elicit.mu.Lock()
	can := p.elicit.can
	p.elicit.mu.Unlock()
	if !can || p.settings(tool).NoElicit || ctx.Value(noElicitKey{}) != nil {
		return answer{}, false
	}
	switch p.askOnce(ctx, tool, id.intent, pf) {
	case fence.Happened, fence.DidNotHappen, settledMeanwhile:
		// Answer from the ledger through the normal fenced path: a replay of what was just
		// recorded, or one run (duplicates coalesce onto it). Never a second question.
		return p.fencedCall(context.WithValue(ctx, noElicitKey{}, true), tool, id, params, task), true
	}
	return answer{}, false
}

// settledMeanwhile is ask's answer when the intent is no longer fenced by the time it would
// ask: another call's question was answered (a duplicate refused just before that answer was
// recorded reaches askOnce after the question closed), or an operator resolved or cleared it.
// Nobody is asked; the call goes back through the fenced path, as after an answer.
const settledMeanwhile fence.Resolution = "settled_meanwhile"

// askOnce asks about intent, or waits for the question already being asked about it.
func (p *Proxy) askOnce(ctx context.Context, tool, intent string, pf fence.PriorFailureError) fence.Resolution {
	e := &p.elicit
	e.mu.Lock()
	if e.settled[intent] {
		e.mu.Unlock()
		return ""
	}
	q := e.asks[intent]
	if q != nil {
		e.mu.Unlock()
		select {
		case <-q.done:
			return q.answer
		case <-ctx.Done():
			return ""
		}
	}
	q = &question{done: make(chan struct{})}
	if e.asks == nil {
		e.asks = map[string]*question{}
	}
	e.asks[intent] = q
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.asks, intent)
		e.mu.Unlock()
		close(q.done)
	}()
	q.answer = p.ask(ctx, tool, intent, pf)
	return q.answer
}

// ask sends the elicitation, records the person's answer and returns it ("" when there is
// none: declined, cancelled, failed, timed out, or not recorded).
func (p *Proxy) ask(ctx context.Context, tool, intent string, pf fence.PriorFailureError) fence.Resolution {
	// The lease is judged by the ledger's clock (the database's, on PostgreSQL), as Resolve
	// judges it: by this host's, a person could be offered "it did not happen" that Resolve
	// then refused.
	rec, now, err := p.opt.Engine.StatusAt(ctx, intent)
	if err != nil {
		p.logf("intent %s: cannot read its record to ask about it: %v", intent, err)
		return ""
	}
	if !rec.State.Fenced() {
		return settledMeanwhile
	}
	if why, silent := p.opt.Engine.SilentHolder(now, rec); silent {
		// The effect may still be under way: a person's "it did not happen" would be refused,
		// and nobody can yet say it happened.
		p.logf("intent %s: the person is not asked: %s", intent, why)
		return ""
	}
	if why, holds := fence.LeaseHolds(now, rec); holds {
		// Its holder is gone, but what it started may still run the call until the lease
		// lapses: "it did not happen" would be refused until then (a person told "run it now,
		// once" saw nothing run). A call after the lapse asks.
		p.logf("intent %s: the person is not asked before the lease lapses: %s", intent, why)
		return ""
	}
	params, _ := json.Marshal(map[string]any{
		"message":         p.elicitMessage(tool, intent, rec, pf),
		"requestedSchema": elicitSchema,
	})
	wait := p.opt.ElicitWait
	if wait <= 0 {
		wait = DefaultElicitWait
	}
	ectx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	res, err := p.childRequest(ectx, "elicitation/create", params)
	if err != nil {
		p.logf("intent %s: asking the person through elicitation failed (%v); the call is refused as before", intent, err)
		return ""
	}
	action, outcome, reference, ok := elicitAnswer(res)
	if !ok {
		p.logf("intent %s: the elicitation answer is not one wrap understands: %.200s", intent, res)
		return ""
	}
	if action != "accept" {
		p.logf("intent %s: the person did not answer the elicitation (%s); the call is refused as before", intent, action)
		if action == "decline" {
			p.noAskAgain(intent)
		}
		return ""
	}
	how, err := fence.ParseResolution(outcome)
	if err != nil {
		p.logf("intent %s: elicitation answer: %v", intent, err)
		return ""
	}
	ref := strings.TrimSpace(reference)
	if len(ref) > maxReference || !utf8.ValidString(ref) {
		p.logf("intent %s: the reference given is not valid UTF-8 or longer than %d bytes; the answer is not recorded", intent, maxReference)
		return ""
	}
	reason := "answered by the person in the conversation"
	// Recorded on the claim the person was asked about only: one cleared and run again since
	// (an operator, or another wrap's person, said it did not happen) may have taken effect.
	req := fence.ResolveRequest{Intent: intent, How: how, Who: "person in the conversation", Via: p.via(), Reason: reason, Token: rec.Token}
	if how == fence.Happened {
		req.Ref = ref
	}
	_, err = p.opt.Engine.Resolve(context.WithoutCancel(ctx), req)
	switch {
	case err == nil:
		p.logf("intent %s: resolved %s by %s", intent, how, fence.WhoVia(req.Who, req.Via))
		if how == fence.LeaveFenced {
			p.noAskAgain(intent)
		}
		return how
	case errors.Is(err, fence.ErrNotFenced), errors.Is(err, fence.ErrNotFound):
		// Settled meanwhile (healed, cleared, resolved elsewhere): the ledger answers the call.
		p.logf("intent %s: the answer %s was not recorded: %v", intent, how, err)
		if how == fence.LeaveFenced {
			return ""
		}
		return how
	default:
		p.logf("intent %s: recording the answer %s failed: %v; the call is refused as before", intent, how, err)
		return ""
	}
}

// elicitAnswer reads an elicitation's result as MCP's SDKs read it: its members ("action",
// "content", and the content's "outcome" and "reference") spelled so, the last of each
// (jsonrpc.MemberValue). Before 2026-12-07 it was read with encoding/json, which also takes a
// member named so but for case, and keeps the last: {"action":"decline","Action":"accept",
// "content":{"outcome":"did_not_happen"}}, a decline to the server's SDK, was recorded as the
// person's "it did not happen", and the next call ran again (TestElicitationAnswerIsReadAsTheSDKsReadIt).
// ok is false for an answer that is not an object, or whose members have the wrong types.
func elicitAnswer(res []byte) (action, outcome, reference string, ok bool) {
	if !json.Valid(res) {
		return "", "", "", false
	}
	str := func(obj []byte, name string, into *string) bool {
		v := jsonrpc.MemberValue(obj, name)
		return v == nil || json.Unmarshal(v, into) == nil
	}
	if i := jsonrpc.SkipSpace(res, 0); res[i] != '{' || !str(res, "action", &action) {
		return "", "", "", false
	}
	if action != "accept" {
		return action, "", "", true
	}
	content := jsonrpc.MemberValue(res, "content")
	if content == nil || content[0] != '{' || !str(content, "outcome", &outcome) || !str(content, "reference", &reference) {
		return "", "", "", false
	}
	return action, outcome, reference, true
}

// noAskAgain keeps this process from asking about intent again.
func (p *Proxy) noAskAgain(intent string) {
	e := &p.elicit
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.settled == nil || len(e.settled) >= maxSeen {
		e.settled = map[string]bool{}
	}
	e.settled[intent] = true
}

// elicitSchema is the form: the three answers and an optional reference.
var elicitSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		ElicitOutcome: map[string]any{
			"type":        "string",
			"title":       "Did it happen?",
			"description": "Check the real system first (the payment dashboard, the inbox, the repository).",
			"enum":        []string{string(fence.Happened), string(fence.DidNotHappen), string(fence.LeaveFenced)},
			"enumNames":   []string{"It happened: record it as done; this call is answered without running it", "It did not happen: run it now, once", "Leave it fenced: decide later"},
		},
		ElicitReference: map[string]any{
			"type":        "string",
			"title":       "Reference (optional)",
			"description": "If it happened: a reference such as a charge or message id; it becomes the call's answer.",
			"maxLength":   maxReference,
		},
	},
	"required": []string{ElicitOutcome},
}

// elicitMessage says what may have happened: the tool, its arguments as the ledger keeps them
// (redacted fields hidden), when, and why the outcome is unknown.
func (p *Proxy) elicitMessage(tool, intent string, rec fence.Record, pf fence.PriorFailureError) string {
	var b strings.Builder
	fmt.Fprintf(&b, "An earlier call of the tool %q may or may not have taken effect, so effectfence has not run it again.\n\n", tool)
	if s := argsSummary(rec.Args); s != "" {
		fmt.Fprintf(&b, "Arguments: %s\n", s)
	}
	if !rec.ClaimedAt.IsZero() {
		fmt.Fprintf(&b, "When: %s\n", rec.ClaimedAt.UTC().Format("2006-01-02 15:04:05 MST"))
	}
	why := pf.Reason
	if rec.Reason != "" {
		why = rec.Reason
	}
	// The server's stderr tail (mcpstdio adds it to the reason for the operator) is not for
	// the conversation: it can quote anything the server logged.
	if i := strings.Index(why, "; its stderr ended with"); i >= 0 {
		why = why[:i]
	}
	fmt.Fprintf(&b, "Why unknown: %s\n\n", safetext.Clip(why, 400))
	// "It happened" records a done outcome now: an identical call replays it within the
	// tool's replay window from now, and one after the window runs as a new action, as after
	// any call that completed. Before 2026-12-07 the choice said "do not run it again", which
	// a wrap with a short --replay-window did after it (as `ledger resolve --happened` said
	// the 24 h result TTL until 2026-12-07).
	fmt.Fprintf(&b, "Please check the real system, then answer. \"It happened\" records it as done and answers this call without running it; an identical call within %s from now is answered the same way, and one after that runs as a new action; \"It did not happen\" runs it now, once; \"Leave it fenced\" runs nothing (an operator can settle it later).\nIntent: %s", shortDuration(min(p.settings(tool).ReplayWindow, p.opt.Engine.Config().ResultTTL)), safetext.EscapeExact(intent))
	return b.String()
}

// argsSummary renders the top-level arguments as "name: value, …", each name and value short,
// the whole bounded, on one line. They are the agent's, any text: line breaks, bidi
// overrides and characters drawn as nothing are shown escaped (safetext), so that a name or
// value cannot add lines of its own to the question (a second "Why unknown:" saying the
// call never ran, which asks for "It did not happen" and so runs it again) or hide or
// reorder what the person reads; before 2026-12-06 they were shown as they were.
func argsSummary(args json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return safetext.Clip(string(args), 600)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := string(m[k])
		var s string
		if json.Unmarshal(m[k], &s) == nil {
			v = s // a string shown without quotes ([redacted] too)
		}
		parts = append(parts, safetext.Clip(k, 80)+": "+safetext.Clip(v, 80))
	}
	return safetext.Clip(strings.Join(parts, ", "), 600)
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// shortDuration is d as time.Duration writes it, without its trailing zero units (10m, not
// 10m0s; 24h, not 24h0m0s).
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
