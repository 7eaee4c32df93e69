package httpfront

import (
	"fmt"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// A progress notification goes to the stream of the request whose progressToken it carries.
// The token is the server's copy: a server that parses the request and writes the token again
// (the TypeScript SDK's JSON.parse and JSON.stringify; encoding/json into any) spells it its
// own way, "t" for "\u0074" and 1 for 1.0. Matched by its bytes, the notification missed its
// request and went to whichever SSE stream was newest: another request's POST.
func TestProgressTokenSpelledOtherwise(t *testing.T) {
	for _, c := range [][2]string{{`"\u0074"`, `"t"`}, {`1.0`, `1`}, {`"é"`, `"\u00e9"`}} {
		s := newSession("test", Caller{}, nil)
		reg := func(id int, meta string) *stream {
			m, err := jsonrpc.Parse([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{}%s}}`, id, meta)))
			if err != nil {
				t.Fatal(err)
			}
			st, _, ok := s.register(m, nil, true, 0)
			if !ok {
				t.Fatal("cannot register")
			}
			return st
		}
		mine := reg(1, `,"_meta":{"progressToken":`+c[0]+`}`)
		other := reg(2, "") // newer: the stream that takes messages of no request's
		note := fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,"progress":1,"total":2}}`, c[1])
		if err := s.Write([]byte(note)); err != nil {
			t.Fatal(err)
		}
		if got := other.take(); len(got) != 0 {
			t.Errorf("progress for token %s (sent as %s) went to another request's stream: %q", c[1], c[0], got)
		}
		if got := mine.take(); len(got) != 1 {
			t.Errorf("progress for token %s (sent as %s) did not reach its request's stream", c[1], c[0])
		}
	}
}

// A request's progress token is its params' "_meta" and that object's "progressToken", spelled
// so, as MCP's SDKs read them: the TypeScript SDK's server writes that token into its progress
// notifications, and its client reads the notification's "progressToken". Before 2026-12-07
// both were read with encoding/json, which also takes "ProgressToken" and keeps the last: the
// request's stream was registered under the other token, and the server's progress went to
// whichever SSE stream was newest, another request's POST.
func TestProgressTokenIsReadAsTheSDKsReadIt(t *testing.T) {
	s := newSession("test", Caller{}, nil)
	reg := func(id int, meta string) *stream {
		m, err := jsonrpc.Parse([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{}%s}}`, id, meta)))
		if err != nil {
			t.Fatal(err)
		}
		st, _, ok := s.register(m, nil, true, 0)
		if !ok {
			t.Fatal("cannot register")
		}
		return st
	}
	mine := reg(1, `,"_meta":{"progressToken":"a","ProgressToken":"b"}`)
	other := reg(2, `,"_meta":{"progressToken":"b"}`)
	newest := reg(3, "")
	for _, note := range []string{
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"a","progress":1}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"a","ProgressToken":"b","progress":2}}`,
	} {
		if err := s.Write([]byte(note)); err != nil {
			t.Fatal(err)
		}
		if got := mine.take(); len(got) != 1 {
			t.Errorf("%s did not reach the stream of the request whose token is \"a\"", note)
		}
		if got := append(other.take(), newest.take()...); len(got) != 0 {
			t.Errorf("%s went to another request's stream: %q", note, got)
		}
	}
}
