package wrap

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// Revisions are the revisions of MCP wrap speaks, newest first: those whose sessions begin
// with initialize, which wrap passes to its server (the server picks one of them). MCP
// 2026-07-28 has no initialize: every request names its revision in _meta
// (RevisionMetaKey), and wrap does not serve such requests yet (docs/DECISIONS-wrap.md,
// "Stateless MCP").
var Revisions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// RevisionMetaKey is the _meta member in which a request of MCP 2026-07-28 or later names
// its revision.
const RevisionMetaKey = "io.modelcontextprotocol/protocolVersion"

// CodeUnsupportedRevision is MCP's error for a request of a revision its receiver does not
// speak (2026-07-28): the error's data lists the receiver's revisions ("supported") and
// echoes the one asked for ("requested"), so the client can retry with one of them. A
// client of MCP's TypeScript SDK 2 that also speaks an earlier revision falls back to
// initialize when the list holds only earlier ones; one that speaks none of them fails with
// this error, naming them.
const CodeUnsupportedRevision = -32022

// UnspokenRevision reports whether the request params name, in _meta, a revision that wrap
// does not speak (a request of stateless MCP, 2026-07-28, which sends no initialize), and
// which: the revision when it is a string of the form YYYY-MM-DD, else "" (the error then
// echoes none). A request without one, or naming one of Revisions, is not such a request.
func UnspokenRevision(params json.RawMessage) (revision string, unspoken bool) {
	raw := jsonrpc.MemberValue(jsonrpc.MemberValue(params, "_meta"), RevisionMetaKey)
	if len(raw) == 0 {
		return "", false
	}
	v := protocolVersionOf(raw)
	if v != "" && slices.Contains(Revisions, v) {
		return "", false
	}
	return v, true
}

// RevisionError is the answer, under id, to a request naming revision (UnspokenRevision's;
// "" when it was not readable), which wrap does not speak: MCP's -32022, listing Revisions.
func RevisionError(id json.RawMessage, revision string) []byte {
	data := struct {
		Supported []string `json:"supported"`
		Requested string   `json:"requested,omitempty"`
	}{Revisions, revision}
	raw, _ := json.Marshal(data) // strings only: it cannot fail
	asked := "an unreadable revision of MCP"
	if revision != "" {
		asked = "MCP " + revision
	}
	msg := fmt.Sprintf("effectfence wrap: %s is not supported yet: wrap speaks MCP %s and %s, whose sessions begin with initialize: send initialize first",
		asked, strings.Join(Revisions[:len(Revisions)-1], ", "), Revisions[len(Revisions)-1])
	return jsonrpc.ErrorResponse(id, &jsonrpc.Error{Code: CodeUnsupportedRevision, Message: msg, Data: raw})
}
