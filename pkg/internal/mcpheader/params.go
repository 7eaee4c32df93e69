package mcpheader

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/textproto"
	"sort"
	"strconv"
	"strings"

	"github.com/effectfence/effectfence/internal/httptoken"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// ParamPrefix starts the headers that mirror a tool's arguments (SEP-2243's custom headers):
// Mcp-Param-{Name}, where a property of the tool's inputSchema says "x-mcp-header": "{Name}".
const ParamPrefix = "Mcp-Param-"

// Param is one argument a tool asks clients to mirror into a header: Name (from x-mcp-header)
// and the property path of the argument (the chain of properties keys leading to it).
type Param struct {
	Name string
	Path []string
}

// maxParamDepth bounds how deep Params looks for annotations (a chain of nested properties).
const maxParamDepth = 32

// Params returns the arguments the tool whose inputSchema is schema (valid JSON) mirrors into headers:
// every property reachable from the root through properties keys alone that carries an
// x-mcp-header whose value is a header field-name token. Annotations anywhere else (under
// items, a composition, a conditional or a $ref) make the tool definition invalid (clients
// drop such a tool), and are not enforced here. Two annotations with one name (which also
// makes the definition invalid) are both enforced: a header must then match both arguments.
func Params(schema json.RawMessage) []Param {
	if !bytes.Contains(schema, []byte("x-mcp-header")) && !bytes.Contains(schema, []byte(`\u`)) {
		return nil // the common case, without decoding the schema
	}
	var out []Param
	walkParams(schema, nil, &out)
	return out
}

// walkParams appends the annotated properties of schema (valid JSON, or nil) under path. The
// keywords are read as JSON Schema reads them, spelled so (jsonrpc.MemberValue), and the last
// property of a name: encoding/json also took "Properties" and "X-Mcp-Header", which no
// validator reads, before 2026-12-07 (TestParamsKeywordsSpelledSo).
func walkParams(schema json.RawMessage, path []string, out *[]Param) {
	if len(path) >= maxParamDepth {
		return
	}
	props := jsonrpc.MemberValue(schema, "properties")
	if len(props) == 0 || props[0] != '{' {
		return
	}
	byName := map[string]json.RawMessage{}
	for m := range jsonrpc.Members(props) {
		byName[jsonrpc.Unquote(props[m.Key:m.KeyEnd])] = props[m.Start:m.End]
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		sub := byName[name]
		at := append(append([]string(nil), path...), name)
		var header string
		if raw := jsonrpc.MemberValue(sub, "x-mcp-header"); len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &header) == nil && httptoken.Valid(header) {
			*out = append(*out, Param{Name: header, Path: at})
		}
		walkParams(sub, at, out)
	}
}

// HasParamHeaders reports whether h holds any Mcp-Param-* header.
func HasParamHeaders(h http.Header) bool {
	for k := range h {
		if len(k) > len(ParamPrefix) && strings.EqualFold(k[:len(ParamPrefix)], ParamPrefix) {
			return true
		}
	}
	return false
}

// Requires reports whether a request sent with protocol version v (its MCP-Protocol-Version
// header) must carry the Mcp-Param-* headers of the arguments it gives: from 2026-07-28 a
// client that omits one is non-conforming and the request is refused; earlier clients send
// none.
func Requires(v string) bool {
	return len(v) == len("2026-07-28") && v >= "2026-07-28"
}

// CheckParams returns why the Mcp-Param-* headers of a tools/call m disagree with its
// arguments, given the tool's params (Params of its inputSchema), or "" when they agree.
// For each param: an argument that is absent or null expects no header, and a header sent
// for it disagrees; an argument that is given must match its header (the header's base64
// form decoded; strings exactly, booleans as true or false, numbers by their exact value, so
// 42.0 matches 42); a header sent twice, or holding characters a header value may not, is
// refused. A missing header is refused only when required (see Requires). Headers no param
// names are not this server's to check.
func CheckParams(h http.Header, params []Param, m *jsonrpc.Message, required bool) string {
	var args json.RawMessage
	if p := bytes.TrimLeft(m.Params, " \t\r\n"); len(p) > 0 && p[0] == '{' && json.Valid(p) {
		if s, e, _, _ := jsonrpc.Member(p, "arguments"); s >= 0 {
			args = p[s:e]
		}
	}
	for _, p := range params {
		header := ParamPrefix + p.Name
		vs := h.Values(textproto.CanonicalMIMEHeaderKey(header))
		value, why := argAt(args, p.Path)
		if why != "" {
			if len(vs) > 0 || required {
				return header + ": the argument " + strings.Join(p.Path, ".") + " " + why
			}
			continue
		}
		if value == nil {
			if len(vs) > 0 {
				return header + " was sent, but the body gives no " + strings.Join(p.Path, ".")
			}
			continue
		}
		switch {
		case len(vs) == 0:
			if required {
				return header + " is missing; the body gives " + strings.Join(p.Path, ".")
			}
			continue
		case len(vs) > 1:
			return header + " was sent more than once"
		}
		for i := 0; i < len(vs[0]); i++ {
			if c := vs[0][i]; (c < 0x20 || c > 0x7e) && c != '\t' {
				return header + " holds a character a header value may not"
			}
		}
		v, ok := decode(vs[0])
		if !ok {
			return header + " holds a base64 value that does not decode"
		}
		if !sameValue(v, value) {
			return header + " does not match " + strings.Join(p.Path, ".") + " in the body"
		}
	}
	return ""
}

// argAt returns the value at path in the arguments object args: nil when it is absent or null
// (or args is), and why not when it cannot be read for sure (a member given twice, which
// readers resolve differently).
func argAt(args json.RawMessage, path []string) (json.RawMessage, string) {
	cur := bytes.TrimLeft(args, " \t\r\n")
	for _, key := range path {
		if len(cur) == 0 || cur[0] != '{' {
			return nil, ""
		}
		s, e, n, _ := jsonrpc.Member(cur, key)
		if n > 1 {
			return nil, "is given more than once"
		}
		if s < 0 {
			return nil, ""
		}
		cur = cur[s:e]
	}
	if len(cur) == 0 || string(cur) == "null" {
		return nil, ""
	}
	return cur, ""
}

// sameValue reports whether the header value h stands for the JSON value v.
func sameValue(h string, v json.RawMessage) bool {
	switch c := v[0]; {
	case c == '"':
		return h == jsonrpc.Unquote(v)
	case c == 't' || c == 'f':
		return h == string(v)
	case c == '-' || '0' <= c && c <= '9':
		a, ok1 := normNumber(h)
		b, ok2 := normNumber(string(v))
		return ok1 && ok2 && a == b
	}
	return false // an object or an array: no header value stands for it
}

// normNumber returns one spelling for each value a JSON number denotes (sign, significant
// digits, exponent), exactly, whatever its size: 42, 42.0 and 4.2e1 read alike. ok is false
// for what is not a JSON number, or has an exponent beyond a million.
func normNumber(s string) (string, bool) {
	if s == "" || !(s[0] == '-' || '0' <= s[0] && s[0] <= '9') || !json.Valid([]byte(s)) {
		return "", false
	}
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e > 1e6 || e < -1e6 {
			return "", false
		}
		mant, exp = s[:i], e
	}
	digits := mant
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		digits = mant[:i] + mant[i+1:]
		exp -= len(mant) - i - 1
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", true // -0 is 0
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + trimmed + "e" + strconv.Itoa(exp), true
}
