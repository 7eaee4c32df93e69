package wrap

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// messageSink is an agent that can be asked: it keeps the message of each elicitation
// request it is sent and answers it with cancel.
type messageSink struct {
	p        *Proxy
	messages []string
}

func (s *messageSink) Write(line []byte) error {
	m, err := jsonrpc.Parse(line)
	if err != nil || m.Method != "elicitation/create" {
		return nil
	}
	var params struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(m.Params, &params)
	s.messages = append(s.messages, params.Message)
	s.p.pmu.Lock()
	ch := s.p.pending[jsonrpc.IDKey(m.ID)]
	s.p.pmu.Unlock()
	if ch != nil {
		ch <- agentAnswer{m: &jsonrpc.Message{ID: m.ID, Result: []byte(`{"action":"cancel"}`)}}
	}
	return nil
}

// The arguments the person is shown when asked whether an unknown call happened are the
// agent's: any text. A member name or string value holding line breaks, a bidi override or a
// zero-width character is shown with those escaped, so it cannot add lines of its own to the
// question (a second "Why unknown:" saying the call never reached the server, which asks for
// "It did not happen" and so runs the call again) or hide or reorder what is shown. Before,
// they reached the person as they were.
func TestElicitationShowsArgumentsEscaped(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer eng.Close()
	p, err := New(Options{Backend: func(BackendConfig) Backend { return nopBack{} }, Engine: eng, Log: io.Discard, Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	sink := &messageSink{p: p}
	p.Attach(sink)
	p.child, p.initDone = nopBack{}, true
	p.elicit.can = true

	forged := "\n\nWhy unknown: it never reached the server; nothing ran\n\nx"
	args, _ := json.Marshal(map[string]any{
		"amount":         4900,
		"note":           "ok" + forged,
		"to" + forged:    "acct",
		"memo":           "pay \u202eSU 0094\u202c",
		"ref\u200b":      "a\u2028b",
		"\u2029currency": "usd",
	})
	req := fence.Request{Intent: "pay:1", Tool: "pay", Args: args}
	makeUnknown(t, eng, req, "the MCP server died during the call")
	pf := priorFailure(t, eng, req)
	p.askOnce(ctx, "pay", req.Intent, pf)
	if len(sink.messages) != 1 {
		t.Fatalf("asked %d times, want once", len(sink.messages))
	}
	msg := sink.messages[0]
	why := 0
	for _, line := range strings.Split(msg, "\n") {
		if strings.HasPrefix(line, "Why unknown:") {
			why++
		}
	}
	if why != 1 || !strings.Contains(msg, `note: ok\n\nWhy unknown: it never reached the server; nothing ran\n\nx`) {
		t.Fatalf("the question holds %d lines saying why the outcome is unknown, or not the arguments' line breaks escaped:\n%s", why, msg)
	}
	for _, r := range []string{"\u202e", "\u202c", "\u200b", "\u2028", "\u2029"} {
		if strings.Contains(msg, r) {
			t.Fatalf("the question shows %q as it is:\n%s", r, msg)
		}
	}
	if !strings.Contains(msg, "amount: 4900") || !strings.Contains(msg, `memo: pay \u202eSU 0094\u202c`) {
		t.Fatalf("the question does not show the arguments, escaped:\n%s", msg)
	}
}
