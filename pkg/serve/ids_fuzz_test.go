package serve

import (
	"bytes"
	"encoding/json"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"testing"
)

// ids.wrap takes any line a client writes: whatever it is, it returns without a panic, and a
// line it changes is still valid JSON (only an id or a requestId is swapped).
func FuzzIDsWrap(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a<b>"}}`,
		`{"jsonrpc":"2.0","method":5,"note":"notifications/cancelled"}`,
		`["notifications/cancelled"]`,
		` {"method":"notifications/cancelled","params":[{"requestId":"a<b>"}]} `,
		`{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call"}`,
		`{"id":"x\udbff","id":1}`,
		`"notifications/cancelled"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		x := newIDs()
		x.wrap([]byte(`{"jsonrpc":"2.0","id":"a<b>","method":"x"}`)) // one id held
		in := bytes.Clone(line)
		out := x.wrap(line)
		if !bytes.Equal(out, in) && !json.Valid(out) {
			t.Fatalf("wrap(%q) = %q, not JSON", in, out)
		}
	})
}

// Whatever the line, answered says a message is answered under its "id" member only when
// mcp-go, reading it with encoding/json as it does, finds a request with that id and no
// result: otherwise the surrogate held for it would never come back, and use up the bound.
func FuzzAnswered(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","reſult":{}}`,
		`{"jsonrpc":2,"id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"ID":2,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"\u0049D":2,"Method":"x","method":"ping"}`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x"},"result":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if !isObject(line) {
			return
		}
		start, end, n, _ := jsonrpc.Member(line, "id")
		if _, ok := answered(line); n != 1 || !ok {
			return
		}
		var env struct { // mcp-go's HandleMessage reads these, so
			JSONRPC string `json:"jsonrpc"`
			Method  string `json:"method"`
			ID      any    `json:"id,omitempty"`
			Result  any    `json:"result,omitempty"`
		}
		// The id is a surrogate, a string, when mcp-go reads the line.
		swapped := append(append(append([]byte(nil), line[:start]...), `"sur"`...), line[end:]...)
		if err := json.Unmarshal(swapped, &env); err != nil || env.ID != "sur" || env.Result != nil {
			t.Fatalf("answered(%s), but mcp-go reads id %v, result %v (%v)", line, env.ID, env.Result, err)
		}
	})
}
