package wrap_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// An agent's tools/list cursor is its "cursor", spelled so, as the TypeScript SDK's server
// reads it. The real server (testdata/paged_server.mjs) lists transfer on both of its pages,
// as it may write on the first and read-only on the second, so wrap keeps it fenced once it
// has seen both. Before 2026-12-07 wrap read the agent's params with encoding/json, which also
// took "Cursor" for the cursor and kept the last: {"cursor":"p2","Cursor":""} was the second
// page to the server and the first to wrap, which replaced what it knew with that page alone,
// and an identical second transfer ran again.
func TestListingCursorIsReadAsTheServerReadsIt(t *testing.T) {
	t.Parallel()
	r := nodeServerRig(t, "paged_server.mjs")
	w := r.wrap()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct{ params, want string }{
		{`{}`, `"nextCursor":"p2"`},
		{`{"cursor":"p2","Cursor":""}`, `"lookup"`}, // the second page, to the server
	} {
		res, err := w.Call(ctx, "tools/list", json.RawMessage(c.params))
		if err != nil || !strings.Contains(string(res), c.want) {
			t.Fatalf("tools/list %s: %s, %v; want a page holding %s", c.params, res, err, c.want)
		}
	}
	first := call(t, w.Session, "transfer", `{"amount":7}`)
	again := call(t, w.Session, "transfer", `{"amount":7}`)
	if first.IsError || first.replayed() || again.IsError || !again.replayed() {
		t.Fatalf("transfer: %q then %q (replayed %v); want it run once, then replayed", first.text(), again.text(), again.replayed())
	}
	if eff := mcptest.Effects(r.effects); len(eff) != 1 {
		t.Fatalf("the server ran %q, want one transfer", eff)
	}
}

// The task a tasks/get, tasks/result or tasks/cancel names is its "taskId", spelled so, as the
// TypeScript SDK's server reads it (the real server-everything here). wrap answers those of
// the tasks it made itself (a task-augmented duplicate answered from the ledger) and passes
// the rest on. Before 2026-12-07 it read the params with encoding/json, which also took
// "TaskId" and kept the last: {"taskId":<the server's running task>,"TaskId":<wrap's>} was
// answered with the result of wrap's task, another call's outcome given as that task's, and
// {"taskId":<wrap's>,"TaskId":<the server's>} went to the server, which knew no such task.
func TestTaskParamsAreReadAsTheServerReadsThem(t *testing.T) {
	t.Parallel()
	bin := peer(t, "mcp-server-everything")
	r := newRig(t)
	r.childCmdOverride = []string{bin}
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	w := r.wrap()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	taskID := func(params string) string {
		t.Helper()
		res, err := w.Call(ctx, "tools/call", json.RawMessage(params))
		var h struct {
			Task struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		}
		if err != nil || json.Unmarshal(res, &h) != nil || h.Task.TaskID == "" {
			t.Fatalf("tools/call %s: %s %v; want a task", params, res, err)
		}
		return h.Task.TaskID
	}
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	// A research run to its end, recorded; its task-augmented duplicate is wrap's own task.
	done := taskID(`{"name":"simulate-research-query","arguments":{"topic":"alpha"},"task":{"ttl":300000}}`)
	awaitTaskCompleted(t, w, json.RawMessage(`{"taskId":`+quote(done)+`}`), time.Minute)
	own := taskID(`{"name":"simulate-research-query","arguments":{"topic":"alpha"},"task":{"ttl":300000}}`)
	if !strings.HasPrefix(own, "effectfence-task-") {
		t.Fatalf("the duplicate's task is %q, want one of wrap's", own)
	}
	running := taskID(`{"name":"simulate-research-query","arguments":{"topic":"beta"},"task":{"ttl":300000}}`)
	if st, err := w.Call(ctx, "tasks/get", json.RawMessage(`{"taskId":`+quote(own)+`,"TaskId":`+quote(running)+`}`)); err != nil || !strings.Contains(string(st), `"status":"completed"`) {
		t.Fatalf("tasks/get of wrap's task, a TaskId beside it: %s %v; want wrap's completed task", st, err)
	}
	res, err := w.Call(ctx, "tasks/result", json.RawMessage(`{"taskId":`+quote(running)+`,"TaskId":`+quote(own)+`}`))
	if err != nil || !strings.Contains(string(res), "Research Report: beta") {
		t.Fatalf("tasks/result of the server's task, a TaskId beside it: %s %v; want its own result (beta)", res, err)
	}
}

// The client's elicitation capability is its capabilities' "elicitation", spelled so, as the
// TypeScript SDK's server reads it in wrap's place: it asks the person (form mode) only when
// that member is an empty object or holds "form". Before 2026-12-07 wrap read the initialize
// params with encoding/json, which also took "Elicitation" and kept the last: a client that
// declared elicitation, followed by "Elicitation":null, was never asked about an unknown
// outcome, and one that declared only "Elicitation" was.
func TestElicitationCapabilityIsReadAsTheSDKsReadIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		caps string
		ask  bool
	}{
		{`{"elicitation":{},"Elicitation":null}`, true},
		{`{"Elicitation":{}}`, false},
		{`{"elicitation":{"form":{}},"Elicitation":{"url":{}}}`, true},
		{`{"elicitation":{"url":{}},"Elicitation":{"form":{}}}`, false},
	} {
		t.Run(tc.caps, func(t *testing.T) {
			t.Parallel()
			if got := tsEval(t, `const {ClientCapabilitiesSchema} = require("@modelcontextprotocol/sdk/types.js");
const c = ClientCapabilitiesSchema.parse(JSON.parse(process.argv[1]));
process.stdout.write(String(Boolean(c.elicitation && c.elicitation.form)));`, tc.caps); got != strconv.FormatBool(tc.ask) {
				t.Fatalf("the TypeScript SDK reads form elicitation in %s as %s, want %v", tc.caps, got, tc.ask)
			}
			var asked atomic.Int32
			r := newRig(t)
			x, _ := r.inproc(wrap.Options{}, `{"protocolVersion":"2025-11-25","capabilities":`+tc.caps+`,"clientInfo":{"name":"a","version":"1"}}`, func(method string, _ json.RawMessage) json.RawMessage {
				if method == "elicitation/create" {
					asked.Add(1)
				}
				return json.RawMessage(`{"action":"decline"}`)
			})
			unknownCall(t, x)
			if res := x.call("die", `{"tag":"s3cret-tag"}`); !res.IsError || string(res.Meta["effectfence/code"]) != `"prior_failure"` {
				t.Fatalf("the retry: %+v; want the refusal", res)
			}
			if got := asked.Load() == 1; got != tc.ask {
				t.Fatalf("the person was asked %d times, want asked: %v", asked.Load(), tc.ask)
			}
		})
	}
}

// The keywords of a key property's schema are read as JSON Schema reads them, spelled so, the
// last of a name: the real server (testdata/schema_server.mjs) checks each call's arguments
// with the TypeScript SDK's JSON Schema validator, which reads no "MaxLength" or "Pattern".
// Before 2026-12-07 wrap read the schema with encoding/json, which also takes such members for
// the keywords, and keeps the last: it filled pay_capped's key (at most 40 characters, then a
// "MaxLength" of 100) with the whole 64-digit hash, and the server refused every call the
// agent left without a key; it took pay_open's "Pattern" for a pattern no key meets and left
// its key out, so the service could not dedupe.
func TestKeySchemaIsReadAsJSONSchemaReadsIt(t *testing.T) {
	t.Parallel()
	r := nodeServerRig(t, "schema_server.mjs")
	w := r.wrap()
	for i, c := range []struct {
		tool string
		key  *regexp.Regexp
	}{
		{"pay_capped", regexp.MustCompile(`key=[0-9a-f]{40}$`)},
		{"pay_open", regexp.MustCompile(`key=[0-9a-f]{64}$`)},
	} {
		first := call(t, w.Session, c.tool, `{"amount":5}`)
		if first.IsError || first.replayed() {
			t.Fatalf("%s {\"amount\":5} through wrap: isError %v, replayed %v: %s", c.tool, first.IsError, first.replayed(), first.text())
		}
		if again := call(t, w.Session, c.tool, `{"amount":5}`); !again.replayed() || again.text() != first.text() {
			t.Fatalf("%s: the duplicate was not replayed the first's result: replayed %v: %s", c.tool, again.replayed(), again.text())
		}
		eff := mcptest.Effects(r.effects)
		if len(eff) != i+1 || !c.key.MatchString(eff[i]) {
			t.Fatalf("%s: effects %q, want one more, with a key matching %s", c.tool, eff, c.key)
		}
	}
}
