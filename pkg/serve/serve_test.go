package serve_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// reply is a JSON-RPC response to tools/call or tools/list, as a client sees it.
type reply struct {
	Result struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
		IsError           bool              `json:"isError"`
		Tools             []json.RawMessage `json:"tools"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type harness struct {
	t   *testing.T
	srv *serve.Server
	eng *fence.Engine
	id  atomic.Int64
}

func newHarness(t *testing.T, cfg fence.Config) *harness {
	t.Helper()
	eng := fence.New(fence.NewMemoryStore(), cfg)
	t.Cleanup(func() { eng.Close() })
	srv, err := serve.New(eng, serve.Options{MaxArgBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, srv: srv, eng: eng}
}

// rpc sends one raw JSON-RPC request through the server's message handler.
func (h *harness) rpc(method string, params any) reply {
	h.t.Helper()
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": h.id.Add(1), "method": method, "params": params})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.raw(msg)
}

func (h *harness) raw(msg []byte) reply {
	h.t.Helper()
	resp := h.srv.MCP().HandleMessage(context.Background(), msg)
	b, err := json.Marshal(resp)
	if err != nil {
		h.t.Fatal(err)
	}
	var r reply
	if err := json.Unmarshal(b, &r); err != nil {
		h.t.Fatalf("decoding %s: %v", b, err)
	}
	return r
}

// call runs a tool and checks that the text block and structuredContent carry the same JSON.
func (h *harness) call(name string, args any) (json.RawMessage, bool) {
	h.t.Helper()
	r := h.rpc("tools/call", map[string]any{"name": name, "arguments": args})
	if r.Error != nil {
		h.t.Fatalf("%s: JSON-RPC error %d %s", name, r.Error.Code, r.Error.Message)
	}
	if len(r.Result.Content) != 1 || r.Result.Content[0].Type != "text" {
		h.t.Fatalf("%s: want one text block, got %+v", name, r.Result.Content)
	}
	var fromText, fromStruct any
	if err := json.Unmarshal([]byte(r.Result.Content[0].Text), &fromText); err != nil {
		h.t.Fatalf("%s: text block is not JSON: %v: %s", name, err, r.Result.Content[0].Text)
	}
	if err := json.Unmarshal(r.Result.StructuredContent, &fromStruct); err != nil {
		h.t.Fatalf("%s: structuredContent: %v", name, err)
	}
	a, _ := json.Marshal(fromText)
	b, _ := json.Marshal(fromStruct)
	if string(a) != string(b) {
		h.t.Fatalf("%s: text block %s differs from structuredContent %s", name, a, b)
	}
	return r.Result.StructuredContent, r.Result.IsError
}

func (h *harness) ok(name string, args any, out any) {
	h.t.Helper()
	raw, isErr := h.call(name, args)
	if isErr {
		h.t.Fatalf("%s: unexpected tool error %s", name, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) refused(name string, args any) serve.Refusal {
	h.t.Helper()
	raw, isErr := h.call(name, args)
	if !isErr {
		h.t.Fatalf("%s: want a tool error, got %s", name, raw)
	}
	var r serve.Refusal
	if err := json.Unmarshal(raw, &r); err != nil {
		h.t.Fatal(err)
	}
	if r.Code == "" || r.Message == "" || r.Next == "" {
		h.t.Fatalf("%s: refusal lacks code, message or next: %s", name, raw)
	}
	return r
}

func prepareArgs(intent string) map[string]any {
	return map[string]any{"intent": intent, "tool": "charge_card", "args": map[string]any{"amount": 4900}}
}

func TestToolsAndSchemas(t *testing.T) {
	h := newHarness(t, fence.Config{})
	r := h.rpc("tools/list", map[string]any{})
	if r.Error != nil {
		t.Fatal(r.Error.Message)
	}
	var names []string
	for _, raw := range r.Result.Tools {
		var tool struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			InputSchema map[string]any `json:"inputSchema"`
		}
		if err := json.Unmarshal(raw, &tool); err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
		if tool.InputSchema["type"] != "object" || tool.InputSchema["additionalProperties"] != false {
			t.Errorf("%s: input schema must be a closed object: %v", tool.Name, tool.InputSchema)
		}
		everyPropertyTyped(t, tool.Name, tool.InputSchema)
		// fence_release alone takes failed (a boolean, optional): a definite failure shared
		// with the waiters; fence_abort is the unknown outcome, which has no such answer.
		props, _ := tool.InputSchema["properties"].(map[string]any)
		failed, hasFailed := props["failed"].(map[string]any)
		required, _ := tool.InputSchema["required"].([]any)
		switch {
		case tool.Name == serve.ToolRelease && (!hasFailed || failed["type"] != "boolean" || slices.Contains(required, any("failed"))):
			t.Errorf("%s: want an optional boolean failed, got %v (required %v)", tool.Name, props["failed"], required)
		case tool.Name != serve.ToolRelease && hasFailed:
			t.Errorf("%s takes failed, which only %s does", tool.Name, serve.ToolRelease)
		}
	}
	want := slices.Clone(serve.Tools)
	slices.Sort(want)
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v (no operator actions)", names, want)
	}
}

// everyPropertyTyped walks a schema and fails for any property without a type.
func everyPropertyTyped(t *testing.T, path string, s map[string]any) {
	t.Helper()
	props, _ := s["properties"].(map[string]any)
	for name, p := range props {
		ps := p.(map[string]any)
		if ps["type"] == nil {
			t.Errorf("%s.%s has no type: %v", path, name, ps)
		}
		everyPropertyTyped(t, path+"."+name, ps)
		if items, ok := ps["items"].(map[string]any); ok {
			everyPropertyTyped(t, path+"."+name+"[]", items)
		}
	}
}

func TestPrepareCommitReplay(t *testing.T) {
	h := newHarness(t, fence.Config{})
	var first serve.PrepareResult
	h.ok(serve.ToolPrepare, prepareArgs("charge:order-1"), &first)
	if first.Status != serve.StatusFresh || first.Ticket == nil || first.Cert != nil {
		t.Fatalf("first prepare: %+v", first)
	}
	var committed serve.CommitResult
	h.ok(serve.ToolCommit, map[string]any{"ticket": first.Ticket, "result": map[string]any{"charge": "ch_1"}}, &committed)
	if err := committed.Cert.Verify(); err != nil {
		t.Fatal(err)
	}
	var dup serve.PrepareResult
	h.ok(serve.ToolPrepare, prepareArgs("charge:order-1"), &dup)
	if dup.Status != serve.StatusAlreadyDone || dup.Ticket != nil || dup.Cert == nil {
		t.Fatalf("duplicate prepare: %+v", dup)
	}
	if dup.Cert.Hash != committed.Cert.Hash || string(dup.Cert.Result) != `{"charge":"ch_1"}` {
		t.Fatalf("replayed cert %+v, committed %+v", dup.Cert, committed.Cert)
	}
	var st serve.StatusResult
	h.ok(serve.ToolStatus, map[string]any{"intent": "charge:order-1", "ticket": first.Ticket}, &st)
	if st.Intent.State != fence.StateDone || st.Intent.Cert == nil || st.Intent.Cert.Hash != committed.Cert.Hash {
		t.Fatalf("status %+v", st.Intent)
	}
	var stats serve.StatsResult
	h.ok(serve.ToolStats, nil, &stats)
	if stats.SinceBoot.Admitted != 1 || stats.SinceBoot.Replayed != 1 || !strings.Contains(stats.Line, "admitted=1 replayed=1") {
		t.Fatalf("stats %+v", stats)
	}
}

func TestConcurrentPreparesOneFresh(t *testing.T) {
	h := newHarness(t, fence.Config{})
	const n = 16
	var (
		wg              sync.WaitGroup
		fresh, inFlight atomic.Int32
		start           = make(chan struct{})
		unexpected      = make(chan string, n)
	)
	for range n {
		wg.Go(func() {
			<-start
			raw, isErr := h.call(serve.ToolPrepare, prepareArgs("payout:7"))
			var p struct {
				Status string `json:"status"`
				Code   string `json:"code"`
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				unexpected <- err.Error()
				return
			}
			switch {
			case !isErr && p.Status == serve.StatusFresh:
				fresh.Add(1)
			case isErr && p.Code == fence.CodeInFlight:
				inFlight.Add(1)
			default:
				unexpected <- string(raw)
			}
		})
	}
	close(start)
	wg.Wait()
	close(unexpected)
	for u := range unexpected {
		t.Errorf("unexpected answer: %s", u)
	}
	if fresh.Load() != 1 || inFlight.Load() != n-1 {
		t.Fatalf("fresh=%d in_flight=%d, want 1 and %d", fresh.Load(), inFlight.Load(), n-1)
	}
}

func TestRefusalsCarryCodeFactsAndNext(t *testing.T) {
	h := newHarness(t, fence.Config{LeaseTTL: time.Minute})

	var held serve.PrepareResult
	h.ok(serve.ToolPrepare, map[string]any{"intent": "scale:web", "tool": "kubectl_scale", "args": map[string]any{"n": 3}, "agent": "sre-a", "domain": "deploy:web"}, &held)

	t.Run("in flight names the holder and lease", func(t *testing.T) {
		r := h.refused(serve.ToolPrepare, map[string]any{"intent": "scale:web", "tool": "kubectl_scale", "args": map[string]any{"n": 3}})
		if r.Code != fence.CodeInFlight || r.Holder == nil || *r.Holder != "sre-a" || r.LeaseUntil == nil || !r.LeaseUntil.Equal(held.Ticket.LeaseUntil) {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("conflict", func(t *testing.T) {
		r := h.refused(serve.ToolPrepare, map[string]any{"intent": "scale:web", "tool": "kubectl_scale", "args": map[string]any{"n": 30}})
		if r.Code != fence.CodeConflict || r.Intent != "scale:web" || r.Executed {
			t.Fatalf("%+v", r)
		}
		// The attempt may be a retry whose args changed: advice to take another intent
		// must say that the recorded call may have run, and how to find out.
		for name, text := range map[string]string{"message": r.Message, "next": r.Next} {
			if strings.Contains(text, "distinct intent") && !strings.Contains(text, "may already have") {
				t.Errorf("the conflict's %s advises a distinct intent without saying the recorded call may have run: %s", name, text)
			}
		}
		if !strings.Contains(r.Next, "may already have run") || !strings.Contains(r.Next, serve.ToolStatus) {
			t.Errorf("the conflict's next does not say the recorded call may have run, nor how to see it: %s", r.Next)
		}
	})
	t.Run("stale read set names domain, expected and actual", func(t *testing.T) {
		r := h.refused(serve.ToolPrepare, map[string]any{"intent": "scale:web-2", "tool": "kubectl_scale",
			"read_set": []map[string]any{{"domain": "deploy:web", "seq": 0}}})
		if r.Code != fence.CodeStale || r.Domain != "deploy:web" || r.Expected == nil || *r.Expected != 0 || r.Actual == nil || *r.Actual != 1 || r.Executed {
			t.Fatalf("%+v", r)
		}
		var st serve.StatusResult
		h.ok(serve.ToolStatus, map[string]any{"domain": "deploy:web"}, &st)
		if st.Domain.Seq != 1 {
			t.Fatalf("domain status %+v", st.Domain)
		}
	})
	forged := []struct {
		name string
		edit func(t fence.Ticket) fence.Ticket
	}{
		{"edited token", func(t fence.Ticket) fence.Ticket { t.Token++; return t }},
		{"edited nonce", func(t fence.Ticket) fence.Ticket { t.Nonce = strings.Repeat("0", 32); return t }},
		{"made-up intent", func(t fence.Ticket) fence.Ticket { t.Intent = "scale:db"; return t }},
	}
	for _, f := range forged {
		t.Run("forged ticket: "+f.name, func(t *testing.T) {
			ticket := f.edit(*held.Ticket)
			for _, tool := range []string{serve.ToolCommit, serve.ToolAbort, serve.ToolRelease, serve.ToolHeartbeat} {
				args := map[string]any{"ticket": ticket}
				if tool == serve.ToolCommit {
					args["result"] = "forged"
				}
				r := h.refused(tool, args)
				if r.Code != fence.CodeLeaseLost {
					t.Fatalf("%s: %+v", tool, r)
				}
				// Nothing is recorded, but a commit reports an effect that ran: it says so.
				if r.Executed != (tool == serve.ToolCommit) {
					t.Fatalf("%s refused with executed %v; want true only for a commit", tool, r.Executed)
				}
			}
			var st serve.StatusResult
			h.ok(serve.ToolStatus, map[string]any{"intent": "scale:web"}, &st)
			if st.Intent.State != fence.StateInFlight || st.Intent.Token != held.Ticket.Token {
				t.Fatalf("a forged ticket changed the ledger: %+v", st.Intent)
			}
		})
	}
	t.Run("status never reveals the nonce", func(t *testing.T) {
		raw, _ := h.call(serve.ToolStatus, map[string]any{"intent": "scale:web"})
		if strings.Contains(string(raw), held.Ticket.Nonce) {
			t.Fatalf("status leaks the ticket nonce: %s", raw)
		}
	})
	t.Run("heartbeat extends the lease", func(t *testing.T) {
		// Only intent, token and nonce are needed: they are what the ledger checks.
		var hb serve.HeartbeatResult
		h.ok(serve.ToolHeartbeat, map[string]any{"ticket": map[string]any{"intent": held.Ticket.Intent, "token": held.Ticket.Token, "nonce": held.Ticket.Nonce}}, &hb)
		// docs/serve.md: "{ticket} with a later lease_until" (strictly: the same lease is
		// not extended).
		if hb.Ticket.Token != held.Ticket.Token || !hb.Ticket.LeaseUntil.After(held.Ticket.LeaseUntil) {
			t.Fatalf("heartbeat %+v after %+v", hb.Ticket, held.Ticket)
		}
	})
	t.Run("abort fences", func(t *testing.T) {
		var end serve.EndResult
		h.ok(serve.ToolAbort, map[string]any{"ticket": held.Ticket, "reason": "timeout talking to the cluster"}, &end)
		if end.State != fence.StateFailed {
			t.Fatalf("%+v", end)
		}
		r := h.refused(serve.ToolPrepare, map[string]any{"intent": "scale:web", "tool": "kubectl_scale", "args": map[string]any{"n": 3}})
		if r.Code != fence.CodePriorFailure || r.State != fence.StateFailed || !strings.Contains(r.Next, "effectfence ledger clear scale:web") {
			t.Fatalf("%+v", r)
		}
		r = h.refused(serve.ToolCommit, map[string]any{"ticket": held.Ticket, "result": 1})
		if r.Code != fence.CodeLeaseLost {
			t.Fatalf("commit after abort: %+v", r)
		}
	})
	t.Run("release frees", func(t *testing.T) {
		var p serve.PrepareResult
		h.ok(serve.ToolPrepare, prepareArgs("refund:9"), &p)
		var end serve.EndResult
		h.ok(serve.ToolRelease, map[string]any{"ticket": p.Ticket, "reason": "card declined before charging"}, &end)
		if end.State != fence.StateNone {
			t.Fatalf("%+v", end)
		}
		var again serve.PrepareResult
		h.ok(serve.ToolPrepare, prepareArgs("refund:9"), &again)
		if again.Status != serve.StatusFresh || again.Ticket.Token <= p.Ticket.Token {
			t.Fatalf("after release: %+v", again)
		}
	})
}

func TestStaleCommitSaysItRan(t *testing.T) {
	h := newHarness(t, fence.Config{})
	var a, b serve.PrepareResult
	h.ok(serve.ToolPrepare, map[string]any{"intent": "a", "tool": "t", "read_set": []map[string]any{{"domain": "acct:1", "seq": 0}}}, &a)
	h.ok(serve.ToolPrepare, map[string]any{"intent": "b", "tool": "t", "domain": "acct:1"}, &b)
	r := h.refused(serve.ToolCommit, map[string]any{"ticket": a.Ticket, "result": nil})
	if r.Code != fence.CodeStale || !r.Executed || r.State != fence.StateFailed || r.Domain != "acct:1" {
		t.Fatalf("%+v", r)
	}
}

func TestBadInput(t *testing.T) {
	h := newHarness(t, fence.Config{})
	cases := []struct {
		name  string
		tool  string
		args  any
		field string
		says  string
	}{
		{"empty intent", serve.ToolPrepare, map[string]any{"intent": "", "tool": "t"}, "intent", "must not be empty"},
		{"missing intent", serve.ToolPrepare, map[string]any{"tool": "t"}, "arguments", "missing property 'intent'"},
		{"intent of the wrong type", serve.ToolPrepare, map[string]any{"intent": 5, "tool": "t"}, "intent", "got number, want string"},
		{"args an array", serve.ToolPrepare, map[string]any{"intent": "x", "tool": "t", "args": []int{1}}, "args", "got array, want null or object"},
		{"unknown field", serve.ToolPrepare, map[string]any{"intent": "x", "tool": "t", "amount": 1}, "arguments", "additional properties 'amount' not allowed"},
		{"arguments not an object", serve.ToolStats, []int{1, 2}, "arguments", "got array, want object"},
		{"wait too long", serve.ToolPrepare, map[string]any{"intent": "x", "tool": "t", "wait_secs": 3600}, "wait_secs", "maximum"},
		{"ticket token a string", serve.ToolCommit, map[string]any{"ticket": map[string]any{"intent": "x", "token": "1", "nonce": "n", "lease_until": "2026-01-01T00:00:00Z"}, "result": 1}, "ticket.token", "got string, want integer"},
		{"missing result", serve.ToolCommit, map[string]any{"ticket": map[string]any{"intent": "x", "token": 1, "nonce": "n", "lease_until": "2026-01-01T00:00:00Z"}}, "arguments", "missing property 'result'"},
		{"status of nothing", serve.ToolStatus, map[string]any{}, "intent", "name an intent, a domain, or both"},
		{"huge arguments", serve.ToolPrepare, map[string]any{"intent": "x", "tool": "t", "args": map[string]any{"blob": strings.Repeat("a", 100<<10)}}, "arguments", "at most 65536 are accepted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.refused(c.tool, c.args)
			if r.Code != fence.CodeInvalid || r.Field != c.field || !strings.Contains(r.Message, c.says) {
				t.Fatalf("got code=%s field=%q message=%q; want %s, %q, containing %q", r.Code, r.Field, r.Message, fence.CodeInvalid, c.field, c.says)
			}
			// A refused commit's effect ran all the same: never "nothing ran".
			commit := c.tool == serve.ToolCommit
			if r.Executed != commit || commit && (strings.Contains(r.Next, "Nothing ran") || !strings.Contains(r.Next, "Nothing was recorded")) {
				t.Fatalf("%s refused with executed %v, next %q", c.tool, r.Executed, r.Next)
			}
		})
	}
	t.Run("unknown tool is a JSON-RPC error", func(t *testing.T) {
		r := h.rpc("tools/call", map[string]any{"name": "fence_clear", "arguments": map[string]any{"intent": "x"}})
		if r.Error == nil || !strings.Contains(r.Error.Message, "fence_clear") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("nothing was recorded", func(t *testing.T) {
		st, err := h.eng.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !st.SinceBoot.IsZero() {
			t.Fatalf("bad input was counted as attempts: %s", st.SinceBoot.Line())
		}
		var p serve.PrepareResult
		h.ok(serve.ToolPrepare, map[string]any{"intent": "x", "tool": "t"}, &p)
		if p.Status != serve.StatusFresh {
			t.Fatalf("the server stopped serving after bad input: %+v", p)
		}
	})
}

func TestPrepareWait(t *testing.T) {
	h := newHarness(t, fence.Config{})
	var first serve.PrepareResult
	h.ok(serve.ToolPrepare, prepareArgs("send:welcome"), &first)

	// While the holder runs, a waiting prepare that runs out of time is refused as in flight.
	r := h.refused(serve.ToolPrepare, map[string]any{"intent": "send:welcome", "tool": "charge_card", "args": map[string]any{"amount": 4900}, "wait_secs": 0.05})
	if r.Code != fence.CodeInFlight {
		t.Fatalf("%+v", r)
	}

	// A waiter with time to spare receives the holder's cert, whether the commit lands while it
	// waits (coalesced) or just before it asks (replayed).
	done := make(chan json.RawMessage, 1)
	go func() {
		raw, _ := h.call(serve.ToolPrepare, map[string]any{"intent": "send:welcome", "tool": "charge_card", "args": map[string]any{"amount": 4900}, "wait_secs": 30})
		done <- raw
	}()
	var c serve.CommitResult
	h.ok(serve.ToolCommit, map[string]any{"ticket": first.Ticket, "result": "sent"}, &c)
	var got serve.PrepareResult
	if err := json.Unmarshal(<-done, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != serve.StatusAlreadyDone || got.Cert.Hash != c.Cert.Hash {
		t.Fatalf("waiter got %+v", got)
	}
}
