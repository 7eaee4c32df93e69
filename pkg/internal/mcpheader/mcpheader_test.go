package mcpheader

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

func b64(s string) string { return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?=" }

func TestCheck(t *testing.T) {
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1}}}`
	unicode := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t\u00f6\u00f6l","arguments":{}}}`
	spaced := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":" charge","arguments":{}}}`
	read := `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}`
	list := `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`
	odd := `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":7}}`
	notObject := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":["charge"]}`
	response := `{"jsonrpc":"2.0","id":6,"result":{}}`
	// Bodies that name their target twice: readers differ on which one counts (first or last;
	// encoding/json matches member names case-insensitively), so no header can agree with them.
	readTwice := `{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"file:///secret","uri":"file:///public"}}`
	readCase := `{"jsonrpc":"2.0","id":8,"method":"resources/read","params":{"uri":"file:///public","URI":"file:///secret"}}`
	promptEscaped := `{"jsonrpc":"2.0","id":9,"method":"prompts/get","params":{"name":"public","n\u0061me":"secret"}}`
	callCase := `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"Name":"charge","name":"read_report"}}`
	for _, c := range []struct {
		name, body string
		h          [][2]string
		want       string // "" or a part of the refusal
	}{
		{"no headers", call, nil, ""},
		{"both agree", call, [][2]string{{"Mcp-Method", "tools/call"}, {"Mcp-Name", "charge"}}, ""},
		{"method only", call, [][2]string{{"Mcp-Method", "tools/call"}}, ""},
		{"another tool", call, [][2]string{{"Mcp-Method", "tools/call"}, {"Mcp-Name", "read_report"}}, "Mcp-Name does not match the name"},
		{"name differs in case", call, [][2]string{{"Mcp-Name", "Charge"}}, "Mcp-Name does not match"},
		{"another method", call, [][2]string{{"Mcp-Method", "tools/list"}}, "Mcp-Method does not match"},
		{"name twice", call, [][2]string{{"Mcp-Name", "charge"}, {"Mcp-Name", "charge"}}, "more than once"},
		{"method twice", call, [][2]string{{"Mcp-Method", "tools/call"}, {"Mcp-Method", "tools/call"}}, "more than once"},
		{"base64 name", unicode, [][2]string{{"Mcp-Name", b64("tööl")}}, ""},
		{"base64 of another name", unicode, [][2]string{{"Mcp-Name", b64("tool")}}, "does not match"},
		{"base64 keeps white space", spaced, [][2]string{{"Mcp-Name", b64(" charge")}}, ""},
		{"undecodable base64", call, [][2]string{{"Mcp-Name", "=?base64?not base64!?="}}, "does not decode"},
		{"base64 of invalid UTF-8", call, [][2]string{{"Mcp-Name", "=?base64?" + base64.StdEncoding.EncodeToString([]byte{0xff}) + "?="}}, "does not decode"},
		{"upper-case markers are literal", call, [][2]string{{"Mcp-Name", "=?BASE64?" + base64.StdEncoding.EncodeToString([]byte("charge")) + "?="}}, "does not match"},
		{"base64 method", call, [][2]string{{"Mcp-Method", b64("tools/call")}}, ""},
		{"resource uri", read, [][2]string{{"Mcp-Method", "resources/read"}, {"Mcp-Name", "file:///a"}}, ""},
		{"another resource", read, [][2]string{{"Mcp-Name", "file:///b"}}, "does not match the uri"},
		{"a name for a method without one", list, [][2]string{{"Mcp-Method", "tools/list"}, {"Mcp-Name", "charge"}}, "names no tool"},
		{"a name that is not a string", odd, [][2]string{{"Mcp-Name", "7"}}, "names no tool"},
		{"params not an object", notObject, [][2]string{{"Mcp-Name", "charge"}}, "names no tool"},
		{"a method on a response", response, [][2]string{{"Mcp-Method", "tools/call"}}, "not a request"},
		{"a uri given twice", readTwice, [][2]string{{"Mcp-Name", "file:///public"}}, "more than once"},
		{"a uri given twice, the other named", readTwice, [][2]string{{"Mcp-Name", "file:///secret"}}, "more than once"},
		{"a uri given again in another case", readCase, [][2]string{{"Mcp-Name", "file:///public"}}, "more than once"},
		{"a prompt name given again escaped", promptEscaped, [][2]string{{"Mcp-Name", "secret"}}, "more than once"},
		{"a tool name given again in another case", callCase, [][2]string{{"Mcp-Name", "read_report"}}, "more than once"},
		{"a uri given twice, no Mcp-Name", readTwice, [][2]string{{"Mcp-Method", "resources/read"}}, ""},
	} {
		m, err := jsonrpc.Parse([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		h := http.Header{}
		for _, kv := range c.h {
			h.Add(kv[0], kv[1])
		}
		got := Check(h, m)
		if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: Check = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestTarget(t *testing.T) {
	for _, c := range []struct {
		method, params, want string
		ok                   bool
	}{
		{"tools/call", `{"name":"a\"b","arguments":{}}`, `a"b`, true},
		{"prompts/get", ` {"name":"p"}`, "p", true},
		{"resources/subscribe", `{"uri":"u"}`, "u", true},
		{"resources/unsubscribe", `{"uri":"u"}`, "u", true},
		{"tools/call", `{"arguments":{}}`, "", false},
		{"tools/call", `{"name":null}`, "", false},
		{"tools/call", `{"name":"a"`, "", false}, // not JSON
		{"tools/list", `{"name":"a"}`, "", false},
		{"tools/call", ``, "", false},
	} {
		got, ok := Target(c.method, []byte(c.params))
		if got != c.want || ok != c.ok {
			t.Errorf("Target(%s, %s) = %q, %v; want %q, %v", c.method, c.params, got, ok, c.want, c.ok)
		}
	}
}
