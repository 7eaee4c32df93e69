package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestServeSettlingCallRefusedAsInvalidNeverSaysNothingRan: an agent that ran an effect
// reports it with fence_abort (outcome unknown), fence_release with failed: true (it ran and
// failed) or fence_heartbeat (it is still running), and the call is refused invalid_request (a
// reason whose text a decoder would change, a ticket token that is no whole number). The
// refusal said "Nothing ran and nothing was recorded", the text of a refused fence_prepare:
// the effect did run, or runs, and an agent told otherwise may run it again once the intent is
// free. It must say only that nothing was recorded, to call the same tool again with the same
// ticket, and not to run the effect again; and the corrected call, sent as told, is recorded.
func TestServeSettlingCallRefusedAsInvalidNeverSaysNothingRan(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--ledger", filepath.Join(t.TempDir(), "ledger.db"))
	for i, c := range []struct{ tool, bad, good string }{
		{serve.ToolAbort, `"reason":"timed out \ud800"`, `"reason":"timed out"`},
		{serve.ToolRelease, `"failed":true,"reason":"HTTP 402 \udfff"`, `"failed":true,"reason":"HTTP 402"`},
		{serve.ToolHeartbeat, "", ""}, // its bad call: the ticket's token 1.5, below
	} {
		intent := "charge:o-settle-" + c.tool
		p := s.prepare(`{"intent":"` + intent + `","tool":"charge_card","args":{"amount":4900}}`)
		if p.Status != serve.StatusFresh {
			t.Fatalf("prepare %d: %+v", i, p)
		}
		tk := ticketJSON(t, p.Ticket)
		bad := `{"ticket":` + tk + `,` + c.bad + `}`
		if c.tool == serve.ToolHeartbeat {
			var m map[string]any
			if err := json.Unmarshal([]byte(tk), &m); err != nil {
				t.Fatal(err)
			}
			m["token"] = 1.5
			b, _ := json.Marshal(m)
			bad = `{"ticket":` + string(b) + `}`
		}
		r := s.refused(c.tool, bad)
		if r.Code != fence.CodeInvalid {
			t.Fatalf("%s %s: %+v; want invalid_request", c.tool, bad, r)
		}
		if strings.Contains(r.Next, "Nothing ran") || !strings.Contains(r.Next, "Nothing was recorded") ||
			!strings.Contains(r.Next, "call "+c.tool+" again with your ticket as it was given to you") || !strings.Contains(r.Next, "do not run the effect again") {
			t.Errorf("%s refused as invalid: next %q\nwant it to say nothing was recorded, to call %s again with the ticket as given, and not to run the effect again (never that nothing ran)", c.tool, r.Next, c.tool)
		}
		good := `{"ticket":` + tk + `}`
		if c.good != "" {
			good = `{"ticket":` + tk + `,` + c.good + `}`
		}
		if raw, isErr := s.call(c.tool, good); isErr {
			t.Errorf("%s sent again as told: %s", c.tool, raw)
		}
	}
	// A call that sent no ticket is not told to send "the same ticket" again (until 2026-12-07
	// it was, by every settling tool, fence_commit too).
	for _, c := range []struct{ tool, args string }{
		{serve.ToolHeartbeat, `{}`}, {serve.ToolAbort, `{"reason":"timed out"}`},
		{serve.ToolRelease, `{"reason":"declined"}`}, {serve.ToolCommit, `{"result":{}}`},
	} {
		r := s.refused(c.tool, c.args)
		if r.Code != fence.CodeInvalid || strings.Contains(r.Next, "same ticket") ||
			!strings.Contains(r.Next, "again with your ticket as it was given to you") {
			t.Errorf("%s without a ticket: %+v\nwant invalid_request, told to send the ticket as it was given", c.tool, r)
		}
	}
}
