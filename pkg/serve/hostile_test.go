package serve_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// Text fields a JSON decoder would change are refused, never merged: "pay:\ud800" and
// "pay:\xff" both decode to "pay:\ufffd", so two different intents (or agents, domains, clock
// entries) became one and the second was handed the first one's receipt. A duplicate member
// is refused too (a decoder keeps the last, a reader of the log may see the first). A tool's
// result is recorded as it came, whatever it holds. Over real pipes, as a client sends them.
func TestTextThatWouldChangeIsRefused(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	call := func(id, tool, args string) (serve.Refusal, bool, json.RawMessage) {
		t.Helper()
		line := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
		raw := recv(t, c.sendLine(id, line), tool+" "+args, 10*time.Second)
		var r struct {
			Result struct {
				StructuredContent json.RawMessage `json:"structuredContent"`
				IsError           bool            `json:"isError"`
			} `json:"result"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%s: %s", args, raw)
		}
		var ref serve.Refusal
		if r.Result.IsError {
			_ = json.Unmarshal(r.Result.StructuredContent, &ref)
		}
		return ref, r.Result.IsError, r.Result.StructuredContent
	}
	for i, tc := range []struct{ tool, args, field string }{
		{serve.ToolPrepare, `{"intent":"pay:\ud800","tool":"pay"}`, "intent"},
		{serve.ToolPrepare, "{\"intent\":\"pay:\xff\",\"tool\":\"pay\"}", "intent"},
		{serve.ToolPrepare, `{"intent":"pay:1","tool":"pay","agent":"B\udbff"}`, "agent"},
		{serve.ToolPrepare, "{\"intent\":\"pay:1\",\"tool\":\"pay\",\"domain\":\"d\xfe\"}", "domain"},
		{serve.ToolPrepare, `{"intent":"pay:1","tool":"pay\udc00"}`, "tool"},
		{serve.ToolPrepare, `{"intent":"pay:1","tool":"pay","vector_clock":{"a\ud800":1}}`, "vector_clock"},
		{serve.ToolPrepare, `{"intent":"pay:1","tool":"pay","read_set":[{"domain":"x\ud800","seq":0}]}`, "read_set"},
		{serve.ToolPrepare, `{"intent":"pay:1","tool":"pay","parent":"\ud800"}`, "parent"},
		{serve.ToolPrepare, `{"intent":"pay:1","intent":"pay:2","tool":"pay"}`, "intent"},
		{serve.ToolCommit, `{"ticket":{"intent":"pay:\ud800","token":1,"nonce":"n"},"result":1}`, "ticket"},
		{serve.ToolStatus, `{"intent":"pay:\ud800"}`, "intent"},
	} {
		ref, isErr, raw := call(strconv.Itoa(1000+i), tc.tool, tc.args)
		if !isErr || ref.Code != fence.CodeInvalid || ref.Field != tc.field {
			t.Errorf("%s %q: want invalid_request on %q, got %s", tc.tool, tc.args, tc.field, raw)
		}
	}
	if st, err := eng.Stats(context.Background()); err != nil || !st.SinceBoot.IsZero() {
		t.Fatalf("refused input reached the engine: %v %v", st.SinceBoot.Line(), err)
	}

	// A result is kept as it came: a lone surrogate, a raw invalid byte, a duplicate member.
	_, isErr, raw := call("100", serve.ToolPrepare, `{"intent":"pay:ok","tool":"pay","agent":"A é"}`)
	var p serve.PrepareResult
	if isErr || json.Unmarshal(raw, &p) != nil || p.Ticket == nil {
		t.Fatalf("prepare: %s", raw)
	}
	result := "{\"t\":\"cut \\ud83d \xff\",\"k\":1,\"k\":2}"
	tk, _ := json.Marshal(p.Ticket)
	_, isErr, raw = call("101", serve.ToolCommit, `{"ticket":`+string(tk)+`,"result":`+result+`}`)
	var cr serve.CommitResult
	if isErr || json.Unmarshal(raw, &cr) != nil || string(cr.Cert.Result) != result || cr.Cert.Verify() != nil {
		t.Fatalf("commit of an odd result: %s", raw)
	}
	if !strings.Contains(string(raw), `"agent":"A é"`) {
		t.Fatalf("a valid non-ASCII agent was changed: %s", raw)
	}
}
