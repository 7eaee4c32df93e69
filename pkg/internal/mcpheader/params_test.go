package mcpheader

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// Params finds annotations on properties reachable through properties keys alone, nested
// too, and none elsewhere.
func TestParams(t *testing.T) {
	schema := `{"type":"object","properties":{
		"region":{"type":"string","x-mcp-header":"Region"},
		"dest":{"type":"object","properties":{"acct":{"type":"string","x-m\u0063p-header":"Account"}}},
		"n":{"type":"integer","x-mcp-header":"N"},
		"bad name":{"type":"string","x-mcp-header":"Has Space"},
		"list":{"type":"array","items":{"type":"object","properties":{"x":{"type":"string","x-mcp-header":"X"}}}},
		"either":{"oneOf":[{"type":"string","x-mcp-header":"E"}]},
		"notstring":{"type":"string","x-mcp-header":7}}}`
	got := Params([]byte(schema))
	want := []Param{{"Account", []string{"dest", "acct"}}, {"N", []string{"n"}}, {"Region", []string{"region"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Params = %v, want %v", got, want)
	}
	if got := Params([]byte(`{"type":"object","properties":{"a":{"type":"string"}}}`)); got != nil {
		t.Fatalf("no annotation: %v", got)
	}
}

// The keywords are read as JSON Schema reads them, spelled so, the last of a name: a
// "Properties" or an "X-Mcp-Header" is no keyword (ajv, which the TypeScript SDK uses, and
// every validator ignore it). Before 2026-12-07 encoding/json read them, which also took
// those and kept the last, so the front asked for Mcp-Param-Z, mirroring an argument no
// client reads as annotated, and refused calls that sent the header of the real one.
func TestParamsKeywordsSpelledSo(t *testing.T) {
	schema := `{"type":"object","properties":{
		"a":{"type":"string","X-Mcp-Header":"A"},
		"b":{"type":"string","x-mcp-header":"B","X-MCP-HEADER":"C"},
		"d":{"type":"string","x-mcp-header":"Old"},
		"d":{"type":"object","properties":{"e":{"type":"string","x-mcp-header":"E"}},"Properties":{"f":{"x-mcp-header":"F"}}}},
		"Properties":{"c":{"type":"string","x-mcp-header":"Z"}}}`
	got := Params([]byte(schema))
	want := []Param{{"B", []string{"b"}}, {"E", []string{"d", "e"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Params = %v, want %v", got, want)
	}
}

func TestCheckParams(t *testing.T) {
	params := []Param{{"Region", []string{"region"}}, {"Account", []string{"dest", "acct"}}, {"N", []string{"n"}}, {"Urgent", []string{"urgent"}}}
	call := func(args string) *jsonrpc.Message {
		m, err := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":` + args + `}}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	full := `{"region":"us-west1","dest":{"acct":"alice"},"n":42,"urgent":true}`
	all := [][2]string{{"Mcp-Param-Region", "us-west1"}, {"Mcp-Param-Account", "alice"}, {"Mcp-Param-N", "42"}, {"Mcp-Param-Urgent", "true"}}
	with := func(pairs [][2]string, extra ...[2]string) [][2]string {
		return append(append([][2]string(nil), pairs...), extra...)
	}
	without := func(name string) [][2]string {
		var out [][2]string
		for _, p := range all {
			if p[0] != name {
				out = append(out, p)
			}
		}
		return out
	}
	for _, c := range []struct {
		name     string
		args     string
		h        [][2]string
		required bool
		want     string // "" or a part of the refusal
	}{
		{"all agree", full, all, true, ""},
		{"no headers, 2025 client", full, nil, false, ""},
		{"no headers, 2026 client", full, nil, true, "Mcp-Param-Region is missing"},
		{"one missing, 2026 client", full, without("Mcp-Param-Account"), true, "Mcp-Param-Account is missing"},
		{"one missing, 2025 client", full, without("Mcp-Param-Account"), false, ""},
		{"another region", full, with(without("Mcp-Param-Region"), [2]string{"Mcp-Param-Region", "eu-west1"}), false, "Mcp-Param-Region does not match region"},
		{"another nested account", full, with(without("Mcp-Param-Account"), [2]string{"Mcp-Param-Account", "bob"}), false, "does not match dest.acct"},
		{"a header name in lower case", full, with(without("Mcp-Param-Account"), [2]string{"mcp-param-account", "bob"}), false, "does not match"},
		{"base64 of the value", `{"region":"Hello, 世界"}`, [][2]string{{"Mcp-Param-Region", b64("Hello, 世界")}}, true, ""},
		{"base64 of another value", `{"region":"Hello, 世界"}`, [][2]string{{"Mcp-Param-Region", b64("Hello")}}, false, "does not match"},
		{"base64 that does not decode", `{"region":"x"}`, [][2]string{{"Mcp-Param-Region", "=?base64?!!?="}}, false, "does not decode"},
		{"the sentinel spelled literally", `{"region":"=?base64?eA==?="}`, [][2]string{{"Mcp-Param-Region", "=?base64?eA==?="}}, false, "does not match"},
		{"42.0 is 42", `{"n":42}`, [][2]string{{"Mcp-Param-N", "42.0"}}, true, ""},
		{"4.2e1 is 42", `{"n":4.2e1}`, [][2]string{{"Mcp-Param-N", "42"}}, true, ""},
		{"2^53+1 is not 2^53", `{"n":9007199254740993}`, [][2]string{{"Mcp-Param-N", "9007199254740992"}}, false, "does not match"},
		{"a number header that is no number", `{"n":42}`, [][2]string{{"Mcp-Param-N", "0x2a"}}, false, "does not match"},
		{"a huge exponent", `{"n":1e999999999}`, [][2]string{{"Mcp-Param-N", "1e999999999"}}, false, "does not match"},
		{"boolean", `{"urgent":false}`, [][2]string{{"Mcp-Param-Urgent", "false"}}, true, ""},
		{"boolean spelled otherwise", `{"urgent":false}`, [][2]string{{"Mcp-Param-Urgent", "False"}}, false, "does not match"},
		{"a string header for a number", `{"region":7}`, [][2]string{{"Mcp-Param-Region", "7"}}, false, ""},
		{"an object argument", `{"region":{"a":1}}`, [][2]string{{"Mcp-Param-Region", "x"}}, false, "does not match"},
		{"null expects no header", `{"region":null}`, nil, true, ""},
		{"a header for a null argument", `{"region":null}`, [][2]string{{"Mcp-Param-Region", "null"}}, false, "gives no region"},
		{"a header for an absent argument", `{}`, [][2]string{{"Mcp-Param-Region", "us-west1"}}, false, "gives no region"},
		{"sent twice", `{"region":"a"}`, [][2]string{{"Mcp-Param-Region", "a"}, {"Mcp-Param-Region", "a"}}, false, "more than once"},
		{"a control character", `{"region":"a\u0001"}`, [][2]string{{"Mcp-Param-Region", "a\x01"}}, false, "a character a header value may not"},
		{"a raw non-ASCII byte", `{"region":"é"}`, [][2]string{{"Mcp-Param-Region", "é"}}, false, "a character a header value may not"},
		{"the argument twice", `{"region":"a","region":"b"}`, [][2]string{{"Mcp-Param-Region", "b"}}, false, "more than once"},
		{"the argument twice, no header, 2026", `{"region":"a","region":"b"}`, nil, true, "more than once"},
		{"a header no param names", `{}`, [][2]string{{"Mcp-Param-Other", "x"}}, true, ""},
	} {
		h := http.Header{}
		for _, kv := range c.h {
			h.Add(kv[0], kv[1])
		}
		got := CheckParams(h, params, call(c.args), c.required)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: CheckParams = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestNormNumber(t *testing.T) {
	same := [][2]string{{"42", "42.0"}, {"42", "4.2e1"}, {"42", "420e-1"}, {"0", "-0.0"}, {"-7", "-7.000"}, {"100", "1E2"}, {"1e400", "10e399"}}
	for _, p := range same {
		a, ok1 := normNumber(p[0])
		b, ok2 := normNumber(p[1])
		if !ok1 || !ok2 || a != b {
			t.Errorf("%s and %s: %q %q", p[0], p[1], a, b)
		}
	}
	for _, s := range []string{"", "+1", "0x1", "1/2", "01", ".5", "1e", "NaN", "1e1000001", "- 1"} {
		if n, ok := normNumber(s); ok {
			t.Errorf("%q read as %q", s, n)
		}
	}
	if a, _ := normNumber("9007199254740993"); a == "9007199254740992e0" {
		t.Errorf("2^53+1 read as 2^53")
	}
}
