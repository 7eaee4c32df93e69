package wrap_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// wantRefusedUnrun sends each of params as a tools/call through w and checks that each is
// refused with -32602 saying the call was NOT executed (and naming want, when given), that the
// server ran nothing (effects counts its runs) and that no record was left in the ledger.
func wantRefusedUnrun(t *testing.T, r *rig, w *wrapProc, want string, effects func() int, params ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range params {
		_, err := w.Call(ctx, "tools/call", json.RawMessage(p))
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpc.Message, want) || !strings.Contains(rpc.Message, "NOT executed") {
			t.Errorf("%s: want a -32602 refusal naming %s and saying the call was NOT executed, got %v", p, want, err)
		}
	}
	if n := effects(); n != 0 {
		t.Errorf("the server ran %d calls, want 0: a refused call must not reach it (%q)", n, mcptest.Effects(r.effects))
	}
	if recs := r.records(t); len(recs) != 0 {
		raw, _ := json.Marshal(recs)
		t.Errorf("a refused call left records behind: %s", raw)
	}
}

// charges is the tools/call params of charge with each of args.
func charges(args ...string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = `{"name":"charge","arguments":` + a + `}`
	}
	return out
}

// A member of the tools/call params spelled as one of MCP's but for case ("Arguments",
// "argumentſ": Unicode case folding makes ſ an s) is what a Go server reads as that member:
// mcp-go (the demo server) decodes the params with encoding/json, which matches names without
// regard to case. Before, wrap read such params as a call without arguments, so two charges
// of different amounts had one identity and the second was answered with the first's receipt
// and never ran. Now they are refused before anything is claimed or sent, as the JSON-RPC
// envelope's members are.
func TestParamsMemberSpelledOtherwiseIsRefused(t *testing.T) {
	t.Parallel()
	r := demoRig(t, "1ms")
	w := r.wrap()
	wantRefusedUnrun(t, r, w, "", func() int { return r.effectsOf("charge_card") },
		`{"name":"charge_card","Arguments":{"amount":5}}`,
		`{"name":"charge_card","argument\u017f":{"amount":500}}`,
		`{"name":"charge_card","ARGUMENTS":{"amount":700},"_meta":{}}`,
		`{"name":"charge_card","arguments":{"amount":9},"Task":{"ttl":60000}}`,
		`{"name":"charge_card","arguments":{"amount":9},"_Meta":{"progressToken":1}}`,
		`{"name":"charge_card","arguments":{"amount":9},"InputResponses":{"ok":{"action":"accept"}}}`,
		`{"name":"charge_card","arguments":{"amount":9},"requeststate":"s-1"}`,
		`{"Name":"charge_card","arguments":{"amount":9}}`,
	)
	// The session goes on, and the members spelled as MCP spells them are fenced as before.
	if x := call(t, w.Session, "charge_card", `{"amount":5}`); x.IsError || x.replayed() {
		t.Fatalf("a plain charge after the refusals: %+v", x)
	}
	if x := call(t, w.Session, "charge_card", `{"amount":500}`); x.IsError || x.replayed() {
		t.Fatalf("a charge of another amount must run: %+v %s", x, x.text())
	}
	if n := r.effectsOf("charge_card"); n != 2 {
		t.Errorf("charge_card ran %d times, want 2", n)
	}
}

// A member of the arguments that a --key or --ignore-field path names but for case ("Order"
// for order) is read as that field by a Go server decoding the arguments into a struct with
// encoding/json (go-sdk's typed tools, mcp-go's BindArguments, the test server), and as
// another member by wrap and by JavaScript and Python servers. Before, wrap took the key field
// as absent: a second order ("Order":"A-2") was refused as intent_conflict although the server
// reads a new order; with the field ignored, calls that differ only in it for the server (so
// are one call by the flag) each ran, under identities of their own. Now such arguments are
// refused with -32602 naming the member, and nothing runs.
func TestKeyFieldSpelledOtherwiseIsRefused(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--key", "--ignore-field"} {
		t.Run(flag, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			w := r.wrap(flag, "charge:order")
			wantRefusedUnrun(t, r, w, `"order"`, r.effectCount, charges(
				`{"amount":5,"Order":"A-1"}`,
				`{"amount":5,"ORDER":"A-2"}`,
				`{"amount":5,"\u004frder":"A-3"}`,
			)...)
			// The field spelled as the flag names it is fenced as before.
			if x := call(t, w.Session, "charge", `{"amount":5,"order":"A-1"}`); x.IsError || x.replayed() {
				t.Fatalf("a charge naming its order: %+v %s", x, x.text())
			}
			if n := r.effectCount(); n != 1 {
				t.Errorf("the server ran %d charges, want 1", n)
			}
		})
	}
}

// The idempotency key wrap injects goes where the tool's schema names it (idempotency_key).
// An agent's member of that name but for case ("Idempotency_Key":"") was not seen, so the key
// was injected beside it: a Go server decoding the arguments into a struct (the test server)
// reads both as the key and keeps the last, the agent's, and ran the charge without the key
// wrap meant it to carry. Now such arguments are refused with -32602 naming the member.
func TestKeyPropertySpelledOtherwiseIsRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	wantRefusedUnrun(t, r, w, `"idempotency_key"`, r.effectCount, charges(
		`{"amount":5,"Idempotency_Key":""}`,
		`{"amount":5,"IDEMPOTENCY_KEY":null}`,
	)...)
}

// A resultType spelled with an escape ("input\u005frequired") is input_required to every JSON
// reader. wrap looked for the plain bytes first, missed it, and recorded the interim answer as
// the call's outcome: the agent's repeat was a replay of it, and the continuation (same
// intent) was answered with the recorded request for input instead of running.
func TestEscapedInputRequiredIsNeverAnOutcome(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw := func(params string) string {
		t.Helper()
		res, err := w.Call(ctx, "tools/call", json.RawMessage(params))
		if err != nil {
			t.Fatal(err)
		}
		return string(res)
	}
	first := `{"name":"confirm","arguments":{"tag":"esc","escaped":true}}`
	for i := range 2 {
		if got := raw(first); !strings.Contains(got, `"resultType":"input\u005frequired"`) || strings.Contains(got, "effectfence/replayed") {
			t.Fatalf("round one, try %d: %s; want the server's input_required, never a replay", i, got)
		}
	}
	cont := `{"name":"confirm","arguments":{"tag":"esc","escaped":true},"inputResponses":{"ok":{"action":"accept","content":{"ok":true}}},"requestState":"state-esc"}`
	if got := raw(cont); !strings.Contains(got, "confirmed n=1") {
		t.Fatalf("continuation: %s; want it run", got)
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// tsReadsIsError says how the TypeScript SDK's client reads a tool result's isError (the
// agent's view): "true", "undefined", "false", or "refused" when its schema refuses the result.
// It skips when Node or the SDK is not installed.
func tsReadsIsError(t *testing.T, res string) string {
	t.Helper()
	return tsEval(t, `const {CallToolResultSchema} = require("@modelcontextprotocol/sdk/types.js");
const r = CallToolResultSchema.safeParse(JSON.parse(process.argv[1]));
process.stdout.write(r.success ? String(r.data.isError) : "refused");`, res)
}

// tsEval runs script in Node with the TypeScript SDK at hand and arg as process.argv[1], and
// returns what it writes. It skips when Node or the SDK is not installed.
func tsEval(t *testing.T, script, arg string) string {
	t.Helper()
	mods, _ := filepath.Abs("../../.peers/node_modules")
	if _, err := os.Stat(filepath.Join(mods, "@modelcontextprotocol/sdk")); err != nil {
		t.Skip("skipping: the TypeScript SDK is not installed; run scripts/install-peers")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("skipping: node is not installed")
	}
	cmd := exec.Command(node, "-e", script, arg)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v: %s", err, out)
	}
	return string(out)
}

// A tool result whose isError readers disagree on: spelled otherwise ("IsError", which
// encoding/json and so wrap took for isError while the TypeScript SDK ignores it: a success
// to the agent, a failure to wrap, which freed the intent so a retry ran again), or not a
// boolean ("true", 1: not a failure to encoding/json, so wrap recorded it and replayed it to
// every retry; the TypeScript SDK refuses the result, Python's lax booleans read a failure).
// Whether the tool took effect cannot be read from it, so the call is unknown and fenced, as
// an answer that is not a JSON-RPC response is.
func TestResultErrorFlagReadTwoWaysIsUnknown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ answer, agent string }{
		{`"IsError":true`, "undefined"},
		{`"isError":"true"`, "refused"},
		{`"isError":1`, "refused"},
		{`"is\u0045rror":"yes"`, "refused"},
	} {
		t.Run(tc.answer, func(t *testing.T) {
			t.Parallel()
			res := `{"content":[{"type":"text","text":"card declined"}],` + tc.answer + `}`
			if got := tsReadsIsError(t, res); got != tc.agent {
				t.Fatalf("the TypeScript SDK reads %s as isError %s, want %s", res, got, tc.agent)
			}
			r := newRig(t)
			w := r.wrap()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args, _ := json.Marshal(map[string]string{"tag": "t", "answer": tc.answer})
			for i, want := range []string{"cannot be told", "NOT executed again"} {
				got, err := w.CallTool(ctx, "fail", args)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(got), `"effectfence/code":"prior_failure"`) || !strings.Contains(string(got), want) {
					t.Fatalf("call %d: %s; want the outcome unknown (prior_failure), saying %q", i+1, got, want)
				}
			}
			if n := r.effectCount(); n != 1 {
				t.Fatalf("%d executions, want 1: a retry must be fenced", n)
			}
		})
	}
}

// A message with a leading byte order mark (PowerShell and some Windows editors write one
// before the first line) is refused, as Node's JSON.parse, Python's json and encoding/json
// refuse it, and nothing runs; but the message after the mark is one JSON object with one id,
// and the sender waits for the answer under it. Before, the refusal went out under id null and
// the client waited for its initialize or call until it timed out.
func TestByteOrderMarkIsRefusedUnderItsID(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.rawWrap()
	const bom = "\ufeff"
	if got := rw.roundTrip(t, bom+`{"jsonrpc":"2.0","id":"init-1","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`); !strings.Contains(got, `"id":"init-1"`) || !strings.Contains(got, `"code":-32700`) {
		t.Fatalf("initialize after a byte order mark: %s; want a -32700 error under its id", got)
	}
	if got := rw.roundTrip(t, initLine); !strings.Contains(got, `"result"`) {
		t.Fatalf("initialize: %s", got)
	}
	rw.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if got := rw.roundTrip(t, bom+`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`); !strings.Contains(got, `"id":7`) || !strings.Contains(got, `"code":-32700`) {
		t.Fatalf("a call after a byte order mark: %s; want a -32700 error under its id", got)
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("the server ran %d charges, want 0", n)
	}
	if recs := r.records(t); len(recs) != 0 {
		t.Fatalf("a refused call left %d records of charge behind", len(recs["charge"]))
	}
}

// A read-only hint spelled otherwise ("ReadOnlyHint":true, "Annotations":{…}) is no hint to
// MCP's SDKs (the TypeScript SDK drops the member: the tool is not read-only to the agent),
// but encoding/json took it for readOnlyHint, so wrap passed the tool through unfenced and an
// identical second call ran again. Only readOnlyHint spelled so passes a tool.
func TestReadOnlyHintSpelledOtherwiseIsFenced(t *testing.T) {
	t.Parallel()
	if got := tsReadsReadOnly(t, `{"tools":[`+mcptest.CaseHintTools+`]}`); got != "undefined" {
		t.Fatalf("the TypeScript SDK reads the hint of %s as %s, want undefined", mcptest.CaseHintTools, got)
	}
	r := newRig(t)
	r.mode = "casehints"
	w := r.wrap()
	first := call(t, w.Session, "unlisted", `{"tag":"h"}`)
	again := call(t, w.Session, "unlisted", `{"tag":"h"}`)
	if first.IsError || first.replayed() || again.IsError || !again.replayed() {
		t.Fatalf("unlisted: %q then %q (replayed %v); want it run once, then replayed", first.text(), again.text(), again.replayed())
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
}

// A listing's tools are its member "tools", spelled so: the TypeScript SDK's client drops a
// "Tools" beside it. encoding/json took "Tools" for "tools", and the last of them: a listing
// that gave "charge" in "tools" (may write) and then read-only in "Tools" passed charge
// through unfenced, and an identical second charge ran again.
func TestListingsToolsSpelledOtherwiseAreNotItsTools(t *testing.T) {
	t.Parallel()
	list := strings.TrimSuffix(mcptest.ToolsList, "}") + "," + mcptest.CaseToolsMember + "}"
	if got := tsEval(t, `const {ListToolsResultSchema} = require("@modelcontextprotocol/sdk/types.js");
const c = ListToolsResultSchema.parse(JSON.parse(process.argv[1])).tools.find((x) => x.name === "charge");
process.stdout.write(String(c && c.annotations && c.annotations.readOnlyHint));`, list); got != "undefined" {
		t.Fatalf("the TypeScript SDK reads charge's readOnlyHint as %s, want undefined", got)
	}
	r := newRig(t)
	r.mode = "casetools"
	w := r.wrap()
	first := call(t, w.Session, "charge", `{"amount":3,"order":"T-1"}`)
	again := call(t, w.Session, "charge", `{"amount":3,"order":"T-1"}`)
	if first.IsError || first.replayed() || again.IsError || !again.replayed() {
		t.Fatalf("charge: %q then %q (replayed %v); want it run once, then replayed", first.text(), again.text(), again.replayed())
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("the server charged %d times, want 1", n)
	}
}

// tsReadsReadOnly says how the TypeScript SDK's client reads the readOnlyHint of the first
// tool of a tools/list result. It skips when Node or the SDK is not installed.
func tsReadsReadOnly(t *testing.T, list string) string {
	t.Helper()
	return tsEval(t, `const {ListToolsResultSchema} = require("@modelcontextprotocol/sdk/types.js");
const a = ListToolsResultSchema.parse(JSON.parse(process.argv[1])).tools[0].annotations;
process.stdout.write(String(a && a.readOnlyHint));`, list)
}

// A member named as a --redact path's field but for case ("Order" under --redact
// charge:order) is that field to a Go server decoding the arguments into a struct (the test
// server charged order SECRET-1), but the path named nothing to wrap, so the ledger kept the
// value in clear. Now such arguments are refused with -32602 naming the member: nothing runs,
// nothing is kept.
func TestRedactFieldSpelledOtherwiseIsRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--redact", "charge:order", "--redact", "charge:card.*.pan")
	wantRefusedUnrun(t, r, w, "redacted field", r.effectCount, charges(
		`{"amount":5,"Order":"SECRET-1"}`,
		`{"amount":5,"order":"A-1","card":{"visa":{"PAN":"SECRET-2"}}}`,
	)...)
	// Spelled as the path names it, the field is redacted as before.
	if x := call(t, w.Session, "charge", `{"amount":5,"order":"SECRET-3","card":{"visa":{"pan":"SECRET-4"}}}`); x.IsError || x.replayed() {
		t.Fatalf("a charge naming its order: %+v %s", x, x.text())
	}
	raw, _ := json.Marshal(r.records(t)["charge"])
	if strings.Contains(string(raw), "SECRET") {
		t.Fatalf("the ledger keeps a redacted value: %s", raw)
	}
}
