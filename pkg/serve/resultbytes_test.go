package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// A duplicate of an intent whose result the cert cannot show in result (not valid UTF-8, or
// nested deeper than fence.MaxNesting) is told that cert.result, null there, is not the
// result, and that cert.result_bytes holds it. Before 2026-12-07 its next said "Use
// cert.result as its result", and an agent doing so took null for what the effect returned.
func TestServeDuplicateOfAResultOnlyInBytesIsToldWhereItIs(t *testing.T) {
	deep := strings.Repeat("[", fence.MaxNesting+10) + "1" + strings.Repeat("]", fence.MaxNesting+10)
	for _, c := range []struct{ name, result string }{
		{"invalid UTF-8", "\"caf\xe9\""},
		{"nested too deep for the cert", deep},
		{"readable", `{"id":"ch_1"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, fence.Config{})
			var prep serve.PrepareResult
			h.ok(serve.ToolPrepare, map[string]any{"intent": "read:1", "tool": "read"}, &prep)
			ticket, _ := json.Marshal(prep.Ticket)
			r := h.raw(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fence_commit","arguments":{"ticket":%s,"result":%s}}}`, ticket, c.result))
			if r.Error != nil || r.Result.IsError {
				t.Fatalf("commit: %+v %s", r.Error, r.Result.StructuredContent)
			}
			var dup serve.PrepareResult
			h.ok(serve.ToolPrepare, map[string]any{"intent": "read:1", "tool": "read"}, &dup)
			if dup.Status != serve.StatusAlreadyDone || dup.Cert == nil || !bytes.Equal(dup.Cert.Result, []byte(c.result)) {
				t.Fatalf("duplicate: %+v, want already_done with the committed result", dup)
			}
			readable := c.name == "readable"
			if dup.ResultInBytes == readable || strings.Contains(dup.Next, "Use cert.result") != readable {
				t.Fatalf("duplicate of a result that cert.result shows: %v; told result_in_bytes %v, next %q", readable, dup.ResultInBytes, dup.Next)
			}
			// What the agent reads: the JSON of the answer, whose result is null but for
			// the readable one, and whose result_bytes is the result.
			raw, _ := h.call(serve.ToolPrepare, map[string]any{"intent": "read:1", "tool": "read"})
			var wire struct {
				Cert struct {
					Result      json.RawMessage `json:"result"`
					ResultBytes []byte          `json:"result_bytes"`
				} `json:"cert"`
			}
			if err := json.Unmarshal(raw, &wire); err != nil {
				t.Fatal(err)
			}
			if string(wire.Cert.Result) == "null" == readable || !bytes.Equal(wire.Cert.ResultBytes, []byte(c.result)) {
				t.Fatalf("the answer's cert: result %.40s, result_bytes %.40q; want result null (readable: %v) and the result in result_bytes", wire.Cert.Result, wire.Cert.ResultBytes, readable)
			}
			// fence_status with proof, and a second commit of another result, say the same.
			var st serve.StatusResult
			h.ok(serve.ToolStatus, map[string]any{"intent": "read:1", "tool": "read"}, &st)
			if st.Intent == nil || st.Intent.Cert == nil || st.Intent.ResultInBytes == readable {
				t.Fatalf("fence_status with proof: %+v; want result_in_bytes %v", st.Intent, !readable)
			}
			differs := h.refused(serve.ToolCommit, map[string]any{"ticket": prep.Ticket, "result": "another"})
			if differs.Code != serve.CodeResultDiffers || differs.ResultInBytes == readable || strings.Contains(differs.Next, "receives cert.result.") != readable {
				t.Fatalf("a second commit of another result: result_in_bytes %v, next %q; want result_in_bytes %v", differs.ResultInBytes, differs.Next, !readable)
			}
		})
	}
}
