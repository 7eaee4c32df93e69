package wrap_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// TestOverlongRequestAnsweredUnderItsID: a request longer than wrap.MaxMessage is refused without
// reaching the child, under its own id (read as the line went by), so the agent's call ends
// rather than waiting for its timeout; a line whose id cannot be read is refused with id null;
// the next request is served. (Where the id may stand, and what the scan gives up on, is
// pkg/internal/jsonrpc's TestReaderTellsTheSkippedRequestsID: each line here costs seconds
// under -race.)
func TestOverlongRequestAnsweredUnderItsID(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rw := r.initializedRawWrap()
	blob := strings.Repeat("x", wrap.MaxMessage)
	cases := []struct{ line, id string }{
		{`{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5,"memo":"` + blob + `"}}}`, `21`},
		{`{"jsonrpc":"2.0","i\u0064":22,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5,"memo":"` + blob + `"}}}`, `null`},
	}
	for _, c := range cases {
		got := rw.roundTrip(t, c.line)
		if want := fmt.Sprintf(`"id":%s,`, c.id); !strings.Contains(got, want) || !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, "longer than") {
			t.Fatalf("an overlong request: got %.300s\nwant an invalid-request error with %s", got, want)
		}
	}
	if got := rw.roundTrip(t, `{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"charge","arguments":{"amount":5}}}`); !strings.Contains(got, `"id":23`) || !strings.Contains(got, "charged 5") {
		t.Fatalf("the request after them: %s", got)
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("want 1 execution (the short call), got %d", n)
	}
}
