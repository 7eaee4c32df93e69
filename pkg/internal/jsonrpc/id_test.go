package jsonrpc

import (
	"strings"
	"testing"
)

func TestReadableID(t *testing.T) {
	cases := []struct{ line, want string }{
		{`{"jsonrpc":"1.0","id":7,"method":"ping"}`, `7`},
		{`{"jsonrpc":"2.0","id":"abc","method":""}`, `"abc"`},
		{`{"jsonrpc":"2.0","id":-1.5e3,"params":"x","method":"tools/call"}`, `-1.5e3`},
		{` {"id" : "x y"} `, `"x y"`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, ``},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, ``},
		{`{"jsonrpc":"2.0","id":true}`, ``},
		{`{"jsonrpc":"2.0","method":"x"}`, ``},
		{`{"jsonrpc":"2.0","id":7,`, ``}, // not JSON: the id cannot be trusted
		{`[{"id":1}]`, ``},
		{``, ``},
		{`{"id":1,"id":2,"method":"ping"}`, ``},            // which one? neither
		{`{"ID":1,"method":"ping"}`, ``},                   // keys are case-sensitive
		{`{"params":{"id":9,"x":[{"id":8}]},"id":3}`, `3`}, // only top-level members count
		{`{"\u0069d":4}`, `4`},                             // a key is what it stands for
		{"\ufeff{\"id\":8,\"method\":\"ping\"}", `8`},      // past a byte order mark
		{"\ufeff\ufeff{\"id\":8,\"method\":\"ping\"}", ``}, // one mark, no more
		// Deeper than encoding/json reads, still one JSON text: its id is readable.
		{`{"id":5,"params":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}`, `5`},
		{`{"id":6,"params":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 99_999) + `}`, ``},
	}
	for _, c := range cases {
		if got := string(ReadableID([]byte(c.line))); got != c.want {
			t.Errorf("ReadableID(%.200s) = %q, want %q", c.line, got, c.want)
		}
	}
}
