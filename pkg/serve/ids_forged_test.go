package serve

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// A client id spelled as a surrogate (a client that saw one echoed, as mcp-go echoes a
// subscriptions/listen request's id as its subscriptionId, or guessed one) is never taken for
// the request that surrogate stands for, and only a response's own id is put back: found in
// review, 2026-12-05, a ping sent under the surrogate of a waiting fence_prepare was answered
// under the prepare's id, and the prepare's answer (its ticket) under the ping's.
func TestForgedSurrogateIDIsNotAnotherRequests(t *testing.T) {
	x := newIDs()
	request := func(id string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"i","tool":"t"}}}`)
	}
	idOf := func(line []byte) string {
		start, end, n, _ := jsonrpc.Member(line, "id")
		if n != 1 {
			t.Fatalf("no single id in %s", line)
		}
		return string(line[start:end])
	}
	held := idOf(x.wrap(request(`"x<y"`))) // replaced: mcp-go would respell "<"
	if !bytes.HasPrefix([]byte(held), x.prefix) {
		t.Fatalf("the id \"x<y\" was not replaced: %s", held)
	}
	forged := idOf(x.wrap(request(held)))
	if forged == held {
		t.Fatalf("a client id equal to another request's surrogate %s passed to mcp-go unchanged", held)
	}
	response := func(id, result string) []byte {
		return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", id, result))
	}
	// The forged request's answer, which echoes the held surrogate in its result, goes back
	// under the forged id, the echo untouched.
	if got, want := string(x.unwrap(response(forged, `{"echo":`+held+`}`))), string(response(held, `{"echo":`+held+`}`)); got != want {
		t.Errorf("the forged request's answer: %s; want %s", got, want)
	}
	// The held request's answer goes back under its own id.
	if got, want := string(x.unwrap(response(held, `{"ticket":1}`))), string(response(`"x<y"`, `{"ticket":1}`)); got != want {
		t.Errorf("the held request's answer: %s; want %s", got, want)
	}
}

// A cancellation naming a surrogate (a client that learnt the prefix, or guesses it) reaches
// no request: mcp-go would have cancelled the request that surrogate stands for. A client's
// own id spelled as a surrogate is still cancelled by name.
func TestForgedSurrogateCancelsNothing(t *testing.T) {
	x := newIDs()
	held := x.wrap([]byte(`{"jsonrpc":"2.0","id":"mine","method":"tools/call","params":{}}`))
	start, end, _, _ := jsonrpc.Member(held, "id")
	sur := string(held[start:end])
	cancel := func(id string) []byte {
		return []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}`)
	}
	for _, forged := range []string{sur, `"\u0065` + sur[2:]} {
		out := string(x.wrap(cancel(forged)))
		if strings.Contains(out, sur[1:len(sur)-1]) || !strings.Contains(out, `"requestId":null`) {
			t.Errorf("a cancellation naming the surrogate %s reaches mcp-go as %s", forged, out)
		}
	}
	if out := string(x.wrap(cancel(`"mine"`))); !strings.Contains(out, `"requestId":`+sur) {
		t.Errorf("the cancellation of the request itself: %s", out)
	}
	// A client id spelled as a surrogate has a surrogate of its own, and is cancelled by name.
	own := x.wrap([]byte(`{"jsonrpc":"2.0","id":` + sur + `,"method":"tools/call","params":{}}`))
	start, end, _, _ = jsonrpc.Member(own, "id")
	if out := string(x.wrap(cancel(sur))); !strings.Contains(out, `"requestId":`+string(own[start:end])) {
		t.Errorf("a cancellation naming the client's id %s (spelled as a surrogate): %s", sur, out)
	}
}
