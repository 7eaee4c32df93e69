// Package mcpheader checks the Mcp-Method and Mcp-Name headers of MCP's Streamable HTTP
// transport (SEP-2243, MCP 2026-07-28), which mirror a request's method and target, against
// the body they came with.
//
// Intermediaries (load balancers, gateways, rate limiters, web application firewalls) route
// and authorise on these headers without reading the body, while the server runs the body.
// A request whose headers name one tool and whose body calls another must therefore be
// refused, or an edge that allows only "read_report" lets "charge_card" through.
package mcpheader

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// The headers, and the JSON-RPC error code for a request whose headers disagree with its body
// (SEP-2243's HeaderMismatch).
const (
	Method       = "Mcp-Method"
	Name         = "Mcp-Name"
	CodeMismatch = -32020
)

const (
	sentinelStart = "=?base64?"
	sentinelEnd   = "?="
)

// nameMember is the params member Mcp-Name mirrors for method, or "" when it mirrors none.
func nameMember(method string) string {
	switch method {
	case "tools/call", "prompts/get":
		return "name"
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		return "uri"
	}
	return ""
}

// Target returns the value Mcp-Name mirrors for a message with method and params: the string
// params.name or params.uri. ok is false when the method has no target or the member is
// missing or not a string.
func Target(method string, params json.RawMessage) (target string, ok bool) {
	member := nameMember(method)
	params = bytes.TrimLeft(params, " \t\r\n")
	if member == "" || len(params) == 0 || params[0] != '{' || !json.Valid(params) {
		return "", false
	}
	start, end, _, _ := jsonrpc.Member(params, member)
	if start < 0 || params[start] != '"' {
		return "", false
	}
	return jsonrpc.Unquote(params[start:end]), true
}

// namedTwice says whether the params object (valid JSON, as Target found) has more than one
// member whose name is member, in any case and however escaped.
func namedTwice(params json.RawMessage, member string) bool {
	n := 0
	for m := range jsonrpc.Members(params) {
		if key := params[m.Key:m.KeyEnd]; jsonrpc.KeyIs(key, member) || strings.EqualFold(jsonrpc.Unquote(key), member) {
			n++
		}
	}
	return n > 1
}

// decode reads a header value: literal, or SEP-2243's base64 form (=?base64?...?=, the
// markers in lower case) for values HTTP cannot carry as they are; ok is false for a base64
// form that does not decode to UTF-8.
func decode(h string) (v string, ok bool) {
	if len(h) < len(sentinelStart)+len(sentinelEnd) || !strings.HasPrefix(h, sentinelStart) || !strings.HasSuffix(h, sentinelEnd) {
		return h, true // the markers are case-sensitive: anything else is literal
	}
	b, err := base64.StdEncoding.DecodeString(h[len(sentinelStart) : len(h)-len(sentinelEnd)])
	if err != nil || !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

// Check returns why the Mcp-Method and Mcp-Name headers of a POST disagree with the message m
// it carries, or "" when they agree or were not sent. Each may be sent once; a header the
// message has nothing to match is a disagreement.
func Check(h http.Header, m *jsonrpc.Message) string {
	if vs := h.Values(Method); len(vs) > 0 {
		if len(vs) > 1 {
			return Method + " was sent more than once"
		}
		v, ok := decode(vs[0])
		if !ok {
			return Method + " holds a base64 value that does not decode"
		}
		if m.Method == "" {
			return Method + " was sent with a message that is not a request or a notification"
		}
		if v != m.Method {
			return Method + " does not match the method of the body"
		}
	}
	if vs := h.Values(Name); len(vs) > 0 {
		if len(vs) > 1 {
			return Name + " was sent more than once"
		}
		v, ok := decode(vs[0])
		if !ok {
			return Name + " holds a base64 value that does not decode"
		}
		target, has := Target(m.Method, m.Params)
		if !has {
			return Name + " was sent with a message that names no tool, prompt or resource"
		}
		if member := nameMember(m.Method); namedTwice(m.Params, member) {
			// Readers differ on which one counts (the first, the last; encoding/json matches
			// names in any case), so the server may run another target than any header names.
			return Name + " cannot agree with a body that gives its " + member + " more than once (or again in another case)"
		}
		if v != target {
			return Name + " does not match the " + nameMember(m.Method) + " in the body"
		}
	}
	return ""
}
