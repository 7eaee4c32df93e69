package serve_test

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

const (
	cardNumber = "4111111111111111"
	apiSecret  = "sk_live_topsecret"
)

func secretPrepare(intent string) map[string]any {
	return map[string]any{"intent": intent, "tool": "charge_card", "args": map[string]any{"amount": 4900, "card": cardNumber}, "agent": "billing"}
}

// TestStatusShowsArgsAndResultOnlyWithProof: anyone who knows an intent id sees its state,
// times and hashes; tool, args, result, agent and reason need the ticket or the same call.
func TestStatusShowsArgsAndResultOnlyWithProof(t *testing.T) {
	h := newHarness(t, fence.Config{})
	var p serve.PrepareResult
	h.ok(serve.ToolPrepare, secretPrepare("charge:42"), &p)
	var other serve.PrepareResult
	h.ok(serve.ToolPrepare, map[string]any{"intent": "other:1", "tool": "t"}, &other)

	var inflight serve.StatusResult
	h.ok(serve.ToolStatus, map[string]any{"intent": "charge:42"}, &inflight)
	if inflight.Intent.State != fence.StateInFlight || inflight.Intent.Agent != "" || inflight.Intent.Withheld == "" || inflight.Intent.LeaseUntil == nil {
		t.Fatalf("in-flight status without proof: %+v", inflight.Intent)
	}
	var c serve.CommitResult
	h.ok(serve.ToolCommit, map[string]any{"ticket": p.Ticket, "result": map[string]any{"charge": "ch_1", "key": apiSecret}}, &c)

	noProof := []map[string]any{
		{"intent": "charge:42"},
		{"intent": "charge:42", "tool": "charge_card", "args": map[string]any{"amount": 4900, "card": "4000000000000002"}},
		{"intent": "charge:42", "tool": "refund", "args": map[string]any{"amount": 4900, "card": cardNumber}},
		{"intent": "charge:42", "ticket": other.Ticket},
		{"intent": "charge:42", "ticket": map[string]any{"intent": "charge:42", "token": p.Ticket.Token, "nonce": strings.Repeat("0", 32)}},
		// A ticket alone names its intent (docs/serve.md); a forged one proves nothing.
		{"ticket": map[string]any{"intent": "charge:42", "token": p.Ticket.Token, "nonce": strings.Repeat("0", 32)}},
	}
	for _, in := range noProof {
		raw, isErr := h.call(serve.ToolStatus, in)
		if isErr {
			t.Fatalf("%v: %s", in, raw)
		}
		for _, secret := range []string{cardNumber, apiSecret, "billing", "charge_card"} {
			if strings.Contains(string(raw), secret) {
				t.Fatalf("status %v without proof shows %q: %s", in, secret, raw)
			}
		}
		if !strings.Contains(string(raw), c.Cert.Hash) || !strings.Contains(string(raw), `"state":"done"`) || !strings.Contains(string(raw), "withheld") {
			t.Fatalf("status %v without proof lacks state, cert hash or the note: %s", in, raw)
		}
	}
	proofs := []map[string]any{
		{"intent": "charge:42", "ticket": p.Ticket},
		{"ticket": p.Ticket}, // the ticket alone: the agent that holds it need not repeat its intent
		// The same call, spelled differently: the fingerprint is canonical.
		{"intent": "charge:42", "tool": "charge_card", "args": map[string]any{"card": cardNumber, "amount": 4900.0}},
	}
	for _, in := range proofs {
		var st serve.StatusResult
		h.ok(serve.ToolStatus, in, &st)
		if st.Intent.Cert == nil || st.Intent.Cert.Hash != c.Cert.Hash || !strings.Contains(string(st.Intent.Cert.Result), apiSecret) ||
			st.Intent.Agent != "billing" || st.Intent.Tool != "charge_card" || st.Intent.Withheld != "" {
			t.Fatalf("status with proof %v: %+v", in, st.Intent)
		}
	}
	if r := h.refused(serve.ToolStatus, map[string]any{"ticket": map[string]any{"intent": "", "token": 1, "nonce": p.Ticket.Nonce}}); r.Code != fence.CodeInvalid || r.Field != "intent" {
		t.Fatalf("status of a ticket without an intent: %+v", r)
	}
}

// TestSecondCommitWithDifferentResult: the retried commit of a done ticket is "recorded" only
// if it carries the recorded result; otherwise it is refused with result_differs and the
// recorded cert, and nothing changes.
func TestSecondCommitWithDifferentResult(t *testing.T) {
	h := newHarness(t, fence.Config{})
	var p serve.PrepareResult
	h.ok(serve.ToolPrepare, prepareArgs("charge:9"), &p)
	var first serve.CommitResult
	h.ok(serve.ToolCommit, map[string]any{"ticket": p.Ticket, "result": map[string]any{"charge": "ch_1", "n": 1}}, &first)
	var again serve.CommitResult
	h.ok(serve.ToolCommit, map[string]any{"ticket": p.Ticket, "result": map[string]any{"n": 1.0, "charge": "ch_1"}}, &again)
	if again.Cert.Hash != first.Cert.Hash {
		t.Fatalf("the same result committed twice: %+v vs %+v", again.Cert, first.Cert)
	}
	r := h.refused(serve.ToolCommit, map[string]any{"ticket": p.Ticket, "result": map[string]any{"charge": "ch_2"}})
	if r.Code != serve.CodeResultDiffers || !r.Executed || r.State != fence.StateDone || r.Cert == nil || r.Cert.Hash != first.Cert.Hash ||
		string(r.Cert.Result) != `{"charge":"ch_1","n":1}` || !strings.Contains(r.Next, "not the result you sent") {
		t.Fatalf("differing commit: %+v", r)
	}
	var dup serve.PrepareResult
	h.ok(serve.ToolPrepare, prepareArgs("charge:9"), &dup)
	if dup.Cert == nil || dup.Cert.Hash != first.Cert.Hash {
		t.Fatalf("the differing commit changed the record: %+v", dup)
	}
}

// TestServeRedactAndKeepHash: fence_prepare's redact and keep_result reach the ledger; a
// duplicate of a hash-only intent is told when it was done and that the result was not kept.
func TestServeRedactAndKeepHash(t *testing.T) {
	h := newHarness(t, fence.Config{})
	in := secretPrepare("key:1")
	in["redact"] = []string{"card"}
	in["keep_result"] = "hash"
	var p serve.PrepareResult
	h.ok(serve.ToolPrepare, in, &p)
	var c serve.CommitResult
	h.ok(serve.ToolCommit, map[string]any{"ticket": p.Ticket, "result": map[string]any{"key": apiSecret}}, &c)
	if strings.Contains(string(c.Cert.Result), apiSecret) || strings.Contains(string(c.Cert.Args), cardNumber) || !strings.Contains(c.Next, "SHA-256") {
		t.Fatalf("commit kept a secret: %+v", c)
	}
	for range 2 {
		var dup serve.PrepareResult
		h.ok(serve.ToolPrepare, in, &dup)
		if dup.Status != serve.StatusAlreadyDone || !dup.ResultNotKept || dup.DoneAt == nil || dup.Ticket != nil ||
			!strings.Contains(dup.Next, "not kept") || !strings.Contains(dup.Next, dup.DoneAt.Format("2006-01-02T15:04:05")) {
			t.Fatalf("duplicate of a hash-only intent: %+v", dup)
		}
	}
	// The retried commit of the same result is recognised by its digest.
	h.ok(serve.ToolCommit, map[string]any{"ticket": p.Ticket, "result": map[string]any{"key": apiSecret}}, &c)
	if r := h.refused(serve.ToolCommit, map[string]any{"ticket": p.Ticket, "result": map[string]any{"key": "other"}}); r.Code != serve.CodeResultDiffers {
		t.Fatalf("%+v", r)
	}
	bad := secretPrepare("key:2")
	bad["keep_result"] = "nothing"
	if r := h.refused(serve.ToolPrepare, bad); r.Code != fence.CodeInvalid || r.Field != "keep_result" {
		t.Fatalf("bad keep_result: %+v", r)
	}
}
