package serve

import (
	"bytes"
	"encoding/json"
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
