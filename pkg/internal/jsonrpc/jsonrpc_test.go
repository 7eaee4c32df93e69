package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		line, kind, err string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, "request", ""},
		{`{"jsonrpc":"2.0","id":"a","method":"x","params":{"k":[1, 2]}}`, "request", ""},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "notification", ""},
		{`{"jsonrpc":"2.0","id":7,"result":{"a": 1}}`, "response", ""},
		{`{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"nope"}}`, "response", ""},
		{`not json`, "", "not a JSON object"},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, "", "batches"},
		{"\ufeff{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", "", "byte order mark"},
		{`{"jsonrpc":"1.0","id":1,"method":"ping"}`, "", `"jsonrpc" must be "2.0"`},
		{`{"jsonrpc":"2.0","id":{},"method":"ping"}`, "", `"id" must be`},
		{`{"jsonrpc":"2.0","id":1,"method":""}`, "", `"method" must not be empty`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":5}`, "", `"params" must be`},
		{`{"jsonrpc":"2.0","id":1}`, "", "neither"},
		{`{"jsonrpc":"2.0","id":1,"error":"x"}`, "", `invalid "error"`},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32000.0,"message":"x"}}`, "response", ""},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":"E1","message":5}}`, "response", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"x"`, "", "invalid JSON"},
		// Read two ways by servers (member names are case-sensitive; encoding/json folds
		// them; parsers keep the first or the last duplicate, or refuse): refused.
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"ping"}`, "", `member "Method" is JSON-RPC's "method" but for case`},
		{`{"jsonrpc":"2.0","ID":1,"method":"ping"}`, "", `member "ID" is JSON-RPC's "id"`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","paramſ":{}}`, "", `member "paramſ" is JSON-RPC's "params"`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","\u0050arams":{}}`, "", `member "Params"`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","method":"y"}`, "", `member "method" is given twice`},
		{`{"jsonrpc":"2.0","id":1,"m\u0065thod":"x","method":"y"}`, "", `member "method" is given twice`},
		{`{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"x"}`, "", `member "jsonrpc" is given twice`},
		{`{"jsonrpc":"2.0","id":7,"result":{},"Result":{}}`, "", `but for case`},
		{`{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"x"},"error":null}`, "", `member "error" is given twice`},
		// Both a result and an error: a success to one reader, a failure to another.
		{`{"jsonrpc":"2.0","id":7,"result":{"content":[]},"error":{"code":1,"message":"x"}}`, "", `both "result" and "error"`},
		{`{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"x"},"result":false}`, "", `both "result" and "error"`},
		// A null beside the other is taken as the other (what careless encoders write).
		{`{"jsonrpc":"2.0","id":7,"result":null,"error":{"code":1,"message":"x"}}`, "response", ""},
		{`{"jsonrpc":"2.0","id":7,"result":{},"error":null}`, "response", ""},
		// Names JSON-RPC does not define, and nested members, are not its business.
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"Method":1,"method":2},"methods":3,"_meta":{}}`, "request", ""},
	}
	for _, c := range cases {
		m, err := Parse([]byte(c.line))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: want error %q, got %v", c.line, c.err, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.line, err)
			continue
		}
		kind := map[bool]string{true: "request"}[m.IsRequest()] + map[bool]string{true: "notification"}[m.IsNotification()] + map[bool]string{true: "response"}[m.IsResponse()]
		if kind != c.kind {
			t.Errorf("%s: kind %q, want %q", c.line, kind, c.kind)
		}
	}
}

func TestRawBytesSurvive(t *testing.T) {
	in := `{"jsonrpc":"2.0","id":7,"result":{"b" : 1.50, "a":"\u00e9<>"}}`
	m, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(Response(m.ID, m.Result)); got != `{"jsonrpc":"2.0","id":7,"result":{"b" : 1.50, "a":"\u00e9<>"}}` {
		t.Fatalf("result re-encoded: %s", got)
	}
	if got := string(Request([]byte("1"), "m<", []byte("{\n\"a\": 1}"))); got != `{"jsonrpc":"2.0","id":1,"method":"m<","params":{"a":1}}` {
		t.Fatalf("a value with a line break must be compacted: %s", got)
	}
}

func TestReaderSkipsLongLinesAndBlankLines(t *testing.T) {
	r := NewReader(strings.NewReader("\n  \r\nshort\r\n"+strings.Repeat("x", 200000)+"\nafter\nlast"), 1000)
	want := []any{"short", ErrTooLong, "after", "last", io.EOF}
	for i, w := range want {
		line, err := r.ReadLine()
		switch w := w.(type) {
		case string:
			if err != nil || string(line) != w {
				t.Fatalf("%d: got %q, %v; want %q", i, line, err, w)
			}
		case error:
			if !errors.Is(err, w) {
				t.Fatalf("%d: got %q, %v; want %v", i, line, err, w)
			}
		}
	}
}

// FuzzParse: any line either is refused with an error or parses into a message whose raw
// parts rebuild into a line that parses to the same message.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,2]}}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`,
		`{"jsonrpc":"2.0","id":"a","result":{"tools":[]}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x","data":{"k":"\u00e9"}}}`,
		`[1]`, `{}`, `nul`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		sameAsEncodingJSON(t, line)
		m, err := Parse(line)
		if err != nil {
			return
		}
		var again []byte
		switch {
		case m.IsRequest():
			again = Request(m.ID, m.Method, m.Params)
		case m.IsNotification():
			again = Notification(m.Method, m.Params)
		case m.Error != nil:
			return // error objects are re-encoded from fields, not spliced
		default:
			again = Response(m.ID, m.Result)
		}
		m2, err := Parse(again)
		if err != nil {
			t.Fatalf("rebuilt line does not parse: %s: %v", again, err)
		}
		if m2.Method != m.Method || string(m2.ID) != string(oneLine(m.ID)) || string(m2.Params) != string(oneLine(m.Params)) || string(m2.Result) != string(oneLine(m.Result)) {
			t.Fatalf("round trip changed the message:\n%s\n%s", line, again)
		}
	})
}

// sameAsEncodingJSON fails when readWire accepts a line and reads it otherwise than
// json.Unmarshal into a wire does.
func sameAsEncodingJSON(t *testing.T, line []byte) {
	t.Helper()
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return
	}
	got, ok := readWire(line, false)
	if !ok {
		return
	}
	var want wire
	if err := json.Unmarshal(line, &want); err != nil {
		t.Fatalf("readWire accepted %s, which encoding/json refuses: %v", line, err)
	}
	if want.Method != nil { // readWire keeps it without the pointer
		want.method, want.hasMethod, want.Method = *want.Method, true, nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("readWire(%s) = %+v, encoding/json reads %+v", line, got, want)
	}
}

func TestReadWireReadsLikeEncodingJSON(t *testing.T) {
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":"}\""}}}`,
		` { "JSONRPC" : "2.0" , "Id" : "a" , "METHOD" : "m" , "Params" : [ 1 ] , "x" : { "id" : 2 } } `,
		`{"jsonrpc":"2.0","id":null,"result":null,"error":null}`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"a","method":null}`,
		`{"jsonrpc":"2.0","jsonrpc":null,"id":-1.5e3,"result":{"a":[true,false,null]}}`,
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"nope"}}`,
		`{}`,
	} {
		if _, ok := readWire([]byte(strings.TrimSpace(line)), false); !ok {
			t.Errorf("readWire refused %s", line)
		}
		sameAsEncodingJSON(t, []byte(line))
	}
	// Left to encoding/json: escapes, non-ASCII names, strings of the wrong type, invalid JSON.
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"a\u0062"}`,
		`{"jsonrpc":"2.0","id":1,"paramſ":{}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
		`{"jsonrpc":2,"id":1,"method":"a"}`,
		`{"jsonrpc":"2.0","id":1,"method":"a"`,
	} {
		if _, ok := readWire([]byte(line), false); ok {
			t.Errorf("readWire accepted %s", line)
		}
	}
}

// A server's error object reaches the agent as the server wrote it: escapes, a line separator,
// a lone surrogate, spacing, member order and members JSON-RPC does not define survive, and so
// do numbers beyond double precision in data. An error made here is written as before.
func TestErrorObjectSurvives(t *testing.T) {
	for _, e := range []string{
		`{"code":-32000, "message":"declined <b>&amp;` + "\u2028\u202e" + ` \u00e9 \ud83d","data":{"big":1e400,"k":1,"k":2},"x-extra":true}`,
		`{"message":"order first","code":-32602}`,
		`{"code":-32603,"message":"\u0041\/"}`,
	} {
		in := `{"jsonrpc":"2.0","id":12345678901234567890123,"error":` + e + `}`
		m, err := Parse([]byte(in))
		if err != nil || m.Error == nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := string(ErrorResponse(m.ID, m.Error)); got != in {
			t.Errorf("error object re-encoded:\n got %s\nwant %s", got, in)
		}
	}
	for raw, want := range map[string]string{
		`{"code":-32000.0,"message":"x"}`:        "JSON-RPC error -32000: x",
		`{"code":"E1","message":5}`:              `JSON-RPC error {"code":"E1","message":5}`,
		`{"code":1e3,"message":"m","data":null}`: "JSON-RPC error 1000: m",
	} {
		m, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"error":` + raw + `}`))
		if err != nil || m.Error.Error() != want {
			t.Errorf("%s: %v %v; want %q", raw, m, err, want)
		}
	}
	mine := &Error{Code: CodeInvalidParams, Message: "bad <x>", Data: json.RawMessage(`{"a": 1}`)}
	if got, want := string(ErrorResponse(json.RawMessage(`"i"`), mine)), `{"jsonrpc":"2.0","id":"i","error":{"code":-32602,"message":"bad <x>","data":{"a": 1}}}`; got != want {
		t.Errorf("an error made here: got %s want %s", got, want)
	}
}

func TestParseOwnedReadsLikeParse(t *testing.T) {
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`,
		` {"jsonrpc":"2.0","id":"a","result":{"content":[]}} `,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no"}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`,
		`{"jsonrpc":"2.0","method":"x/\u0079","id":2}`,
		`{"jsonrpc":"2.0","method":null,"id":2,"result":{}}`,
		`{"jsonrpc":"2.0","method":""}`,
	} {
		a, aerr := Parse([]byte(line))
		b, berr := ParseOwned([]byte(line))
		if !reflect.DeepEqual(a, b) || fmt.Sprint(aerr) != fmt.Sprint(berr) {
			t.Errorf("%s: Parse %+v, %v; ParseOwned %+v, %v", line, a, aerr, b, berr)
		}
	}
}
